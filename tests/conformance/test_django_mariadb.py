"""The whole kit, bound to DjangoStorage on MariaDB (the ``mariadb`` alias).

Configured by MILLRACE_TEST_MARIADB_URL (``scripts/testdb.sh`` starts a throwaway server);
skipped when unset, except in CI, where it fails.
"""

from __future__ import annotations

from millrace_django.conformance import JobStorageFacts, MonitoringFacts, WorkflowStorageFacts
from tests.conformance.django_harness import DjangoBinding, server_marks

pytestmark = server_marks("mariadb", "MILLRACE_TEST_MARIADB_URL")


class MariaDBBinding(DjangoBinding):
    alias = "mariadb"


class TestMariaDBJobStorage(MariaDBBinding, JobStorageFacts):
    pass


class TestMariaDBWorkflowStorage(MariaDBBinding, WorkflowStorageFacts):
    pass


class TestMariaDBMonitoring(MariaDBBinding, MonitoringFacts):
    pass
