"""The whole kit, bound to DjangoStorage on MariaDB (the ``mariadb`` alias).

Configured by MILLRACE_TEST_MARIADB_URL (``scripts/testdb.sh`` starts a throwaway server);
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

ALIAS = "mariadb"
require_alias(ALIAS, "MILLRACE_TEST_MARIADB_URL")
pytestmark = [pytest.mark.mariadb, pytest.mark.django_db(transaction=True, databases=[ALIAS])]


class MariaDBBinding:
    @pytest.fixture
    def harness(self) -> StorageHarness:
        return DjangoHarness(ALIAS)


class TestMariaDBJobStorage(MariaDBBinding, JobStorageFacts):
    pass


class TestMariaDBWorkflowStorage(MariaDBBinding, WorkflowStorageFacts):
    pass


class TestMariaDBMonitoring(MariaDBBinding, MonitoringFacts):
    pass
