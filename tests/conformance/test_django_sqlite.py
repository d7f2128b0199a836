"""The whole kit, bound to DjangoStorage on SQLite (a file, so racer threads share it)."""

from __future__ import annotations

import pytest

from millrace_django.conformance import (
    JobStorageFacts,
    MonitoringFacts,
    StorageHarness,
    WorkflowStorageFacts,
)
from tests.conformance.django_harness import DjangoHarness

ALIAS = "default"
pytestmark = pytest.mark.django_db(transaction=True, databases=[ALIAS])


class SqliteBinding:
    @pytest.fixture
    def harness(self) -> StorageHarness:
        return DjangoHarness(ALIAS)


class TestSqliteJobStorage(SqliteBinding, JobStorageFacts):
    pass


class TestSqliteWorkflowStorage(SqliteBinding, WorkflowStorageFacts):
    pass


class TestSqliteMonitoring(SqliteBinding, MonitoringFacts):
    pass
