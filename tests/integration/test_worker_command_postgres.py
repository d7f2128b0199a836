"""``call_command("millrace_worker", ...)`` inside a longer process (a test suite) on
PostgreSQL: every thread the command starts closes its database sessions as it ends,
so repeated runs leave none behind (each used to leave its scheduler thread's session,
which kept a suite from dropping its test database and could exhaust
``max_connections``); and its workflow steps open no connection of their own, whatever
``CONN_MAX_AGE`` (a step's instance is read with its claim and its checkpoint written with
its acknowledgement, on the worker's loop threads; with ``CONN_MAX_AGE = 0`` each step used
to connect afresh on its job thread).

Configured by MILLRACE_TEST_POSTGRES_URL (``scripts/testdb.sh`` starts a throwaway
server); skipped when unset, except in CI, where it fails.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.core.management import call_command
from django.db import connections
from django.db.backends.signals import connection_created
from django.test import override_settings

from millrace_django import workflows
from millrace_django.contract import InstanceState
from tests.conformance.django_harness import server_marks
from tests.integration import workflow_flows as flows
from tests.integration.ledger_jobs import LEDGER_VARIABLE
from tests.unit import command_jobs

ALIAS = "postgres"
pytestmark = server_marks(ALIAS, "MILLRACE_TEST_POSTGRES_URL")

RUNS = 5


@pytest.fixture(autouse=True)
def jobs_on_postgres() -> Iterator[None]:
    command_jobs.ran.clear()  # (a test elsewhere may have left its runs)
    with override_settings(MILLRACE={**settings.MILLRACE, "DATABASE": ALIAS}):
        yield
    command_jobs.ran.clear()


def other_sessions() -> int:
    """Sessions on the test database besides this test's own."""
    with connections[ALIAS].cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        (count,) = cursor.fetchone()
    return int(count)


@pytest.mark.parametrize("max_age", [0, 600], ids=["conn-max-age-0", "conn-max-age-600"])
def test_repeated_until_idle_runs_leave_no_database_session_behind(
    max_age: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # With a positive CONN_MAX_AGE, job threads keep their connection between jobs.
    monkeypatch.setitem(connections.settings[ALIAS], "CONN_MAX_AGE", max_age)
    before = other_sessions()
    for _ in range(RUNS):
        command_jobs.touch_database.enqueue(ALIAS)
        call_command("millrace_worker", "--until-idle", stdout=io.StringIO(), stderr=io.StringIO())
    assert len(command_jobs.ran) == RUNS
    assert other_sessions() == before


INSTANCES = 40


def test_workflow_steps_open_no_connection_per_step_with_conn_max_age_zero(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setitem(connections.settings[ALIAS], "CONN_MAX_AGE", 0)
    monkeypatch.setenv(LEDGER_VARIABLE, str(tmp_path / "ledger.txt"))
    ids = workflows.start_many(flows.THREE_STEPS, [{} for _ in range(INSTANCES)])
    opened: list[str] = []

    def count(sender: Any, connection: Any, **kwargs: Any) -> None:
        opened.append(connection.alias)

    connection_created.connect(count)
    try:
        call_command("millrace_worker", "--until-idle", stdout=io.StringIO(), stderr=io.StringIO())
    finally:
        connection_created.disconnect(count)

    for instance_id in ids:
        assert workflows.get(instance_id).state is InstanceState.COMPLETED  # type: ignore[union-attr]
    steps = 3 * INSTANCES
    # The worker's own threads (claim, acknowledgement, heartbeat, scheduler, listener,
    # registry): a handful, however many steps ran.
    assert opened.count(ALIAS) < 15, (len(opened), steps)
