"""The whole kit, bound to DjangoStorage on SQL Server (the ``sqlserver`` alias).

Configured by MILLRACE_TEST_SQLSERVER_URL, e.g.
``mssql://sa:Secret-123@127.0.0.1:1433/millrace?TrustServerCertificate=yes`` (needs
Microsoft's ODBC Driver 18 for SQL Server). No SQL Server runs on our machines or in CI,
so this module is skipped when the variable is unset, in CI too: SQL Server's SQL is
checked by compilation (tests/unit/test_sqlserver_sql.py), and nothing here claims more.
"""

from __future__ import annotations

import pytest
from django.conf import settings

from millrace_django.conformance import JobStorageFacts, MonitoringFacts, WorkflowStorageFacts
from tests.conformance.django_harness import DjangoBinding, server_marks

ALIAS = "sqlserver"
if ALIAS not in settings.DATABASES:
    pytest.skip(
        "MILLRACE_TEST_SQLSERVER_URL is not set: the kit did NOT run against SQL Server "
        "(its SQL is only compiled, in tests/unit/test_sqlserver_sql.py)",
        allow_module_level=True,
    )
pytestmark = server_marks(ALIAS, "MILLRACE_TEST_SQLSERVER_URL")


class SQLServerBinding(DjangoBinding):
    alias = ALIAS


class TestSQLServerJobStorage(SQLServerBinding, JobStorageFacts):
    pass


class TestSQLServerWorkflowStorage(SQLServerBinding, WorkflowStorageFacts):
    pass


class TestSQLServerMonitoring(SQLServerBinding, MonitoringFacts):
    pass
