"""The whole kit, bound to DjangoStorage on SQLite (a file, so racer threads share it).

SQLite runs one writing transaction at a time (the test settings begin each one
``IMMEDIATE``), so its races run at the kit's single-writer contention."""

from __future__ import annotations

import pytest

from millrace_django.conformance import (
    SINGLE_WRITER_CONTENTION,
    JobStorageFacts,
    MonitoringFacts,
    StorageHarness,
    WorkflowStorageFacts,
)
from tests.conformance.django_harness import DjangoHarness

ALIAS = "default"
pytestmark = pytest.mark.django_db(transaction=True, databases=[ALIAS])


class SqliteBinding:
    contention = SINGLE_WRITER_CONTENTION

    @pytest.fixture
    def harness(self) -> StorageHarness:
        return DjangoHarness(ALIAS)


class TestSqliteJobStorage(SqliteBinding, JobStorageFacts):
    pass


class TestSqliteWorkflowStorage(SqliteBinding, WorkflowStorageFacts):
    pass


class TestSqliteMonitoring(SqliteBinding, MonitoringFacts):
    pass
