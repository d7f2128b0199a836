"""The whole kit, bound to DjangoStorage on PostgreSQL (the ``postgres`` alias).

Configured by MILLRACE_TEST_POSTGRES_URL (``scripts/testdb.sh`` starts a throwaway server);
skipped when unset, except in CI, where it fails.
"""

from __future__ import annotations

import pytest

from millrace_django.conformance import (
    JobStorageFacts,
    MonitoringFacts,
    StorageHarness,
    WorkflowStorageFacts,
)
from tests.conformance.django_harness import DjangoHarness, require_alias

ALIAS = "postgres"
require_alias(ALIAS, "MILLRACE_TEST_POSTGRES_URL")
pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True, databases=[ALIAS])]


class PostgreSQLBinding:
    @pytest.fixture
    def harness(self) -> StorageHarness:
        return DjangoHarness(ALIAS)


class TestPostgreSQLJobStorage(PostgreSQLBinding, JobStorageFacts):
    pass


class TestPostgreSQLWorkflowStorage(PostgreSQLBinding, WorkflowStorageFacts):
    pass


class TestPostgreSQLMonitoring(PostgreSQLBinding, MonitoringFacts):
    pass
