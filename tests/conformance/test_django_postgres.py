"""The whole kit, bound to DjangoStorage on PostgreSQL (the ``postgres`` alias).

Configured by MILLRACE_TEST_POSTGRES_URL (``scripts/testdb.sh`` starts a throwaway server);
skipped when unset, except in CI, where it fails.
"""

from __future__ import annotations

from millrace_django.conformance import JobStorageFacts, MonitoringFacts, WorkflowStorageFacts
from tests.conformance.django_harness import DjangoBinding, server_marks

pytestmark = server_marks("postgres", "MILLRACE_TEST_POSTGRES_URL")


class PostgreSQLBinding(DjangoBinding):
    alias = "postgres"


class TestPostgreSQLJobStorage(PostgreSQLBinding, JobStorageFacts):
    pass


class TestPostgreSQLWorkflowStorage(PostgreSQLBinding, WorkflowStorageFacts):
    pass


class TestPostgreSQLMonitoring(PostgreSQLBinding, MonitoringFacts):
    pass
