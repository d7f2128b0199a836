"""The ORM provider's transactions: replayed whole on contention, bounded in time, never
left open, and joined (as a savepoint) when the caller already has one."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.conf import settings
from django.db import DatabaseError, OperationalError, connections, transaction

from millrace_django.checks import check_settings
from millrace_django.clock import FakeClock
from millrace_django.conformance.support import make_job
from millrace_django.models import Job
from millrace_django.storage.orm import DjangoStorage, configuration_problems
from millrace_django.storage.orm.rows import job_row
from millrace_django.storage.orm.transactions import InsertConflict, Transactions
from millrace_django.storage.orm.vendors import Vendor, vendor_for
from millrace_django.storage.orm.vendors.mysql import MariaDB
from millrace_django.storage.orm.vendors.sqlite import SQLite

ALIASES = [alias for alias in ("default", "postgres", "mariadb") if alias in settings.DATABASES]
pytestmark = pytest.mark.django_db(transaction=True, databases=ALIASES)

SLOW_STATEMENTS = {
    "postgresql": "SELECT pg_sleep(2)",
    "mysql": "SELECT SLEEP(2)",
    "sqlite": "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) "
    "SELECT count(*) FROM n",
}


@pytest.fixture(params=ALIASES)
def alias(request: pytest.FixtureRequest) -> Iterator[str]:
    yield request.param
    Job.objects.using(request.param).all().delete()


class EveryErrorIsTransient(Vendor):
    def is_transient(self, error: DatabaseError) -> bool:
        return True


def _insert_then_fail(alias: str, failures: list[str]) -> None:
    Job.objects.using(alias).bulk_create([_row()])
    if failures:
        raise OperationalError(failures.pop())


def _row() -> Job:
    return job_row(make_job(FakeClock()), track_scope=False)


def test_a_transient_error_replays_the_whole_transaction(alias: str) -> None:
    tx = Transactions(alias, EveryErrorIsTransient(), attempts=3)
    failures = ["deadlock", "deadlock"]

    tx.write(lambda: _insert_then_fail(alias, failures))

    assert failures == []
    assert Job.objects.using(alias).count() == 1, "the failed attempts' writes were not undone"


def test_replays_are_bounded(alias: str) -> None:
    tx = Transactions(alias, EveryErrorIsTransient(), attempts=2)
    failures = ["deadlock"] * 3

    with pytest.raises(OperationalError):
        tx.write(lambda: _insert_then_fail(alias, failures))

    assert failures == ["deadlock"], "ran more than the allowed attempts"
    assert Job.objects.using(alias).count() == 0


def test_an_error_that_is_not_transient_is_not_replayed(alias: str) -> None:
    tx = Transactions(alias, Vendor(), attempts=5)
    failures = ["disk full"] * 2

    with pytest.raises(OperationalError):
        tx.write(lambda: _insert_then_fail(alias, failures))

    assert failures == ["disk full"]


def test_a_lost_insert_race_replays_even_inside_a_callers_transaction(alias: str) -> None:
    tx = Transactions(alias, Vendor(), attempts=3)
    raised = [InsertConflict("taken")]

    def work() -> str:
        Job.objects.using(alias).bulk_create([_row()])
        if raised:
            raise raised.pop()
        return "done"

    with transaction.atomic(using=alias):
        assert tx.write(work) == "done"
    assert Job.objects.using(alias).count() == 1, "the losing attempt was not rolled back"


def test_a_storage_call_inside_a_callers_transaction_commits_with_it(alias: str) -> None:
    clock = FakeClock()
    storage = DjangoStorage(alias, clock)
    kept, dropped = make_job(clock), make_job(clock)

    with transaction.atomic(using=alias):
        storage.enqueue([kept])
    with pytest.raises(RuntimeError), transaction.atomic(using=alias):
        storage.enqueue([dropped])
        raise RuntimeError("the caller changed its mind")

    assert storage.get_job(kept.id) is not None
    assert storage.get_job(dropped.id) is None


def test_no_transaction_is_left_open_after_a_storage_call(alias: str) -> None:
    clock = FakeClock()
    storage = DjangoStorage(alias, clock)
    job = make_job(clock)
    storage.enqueue([job])
    storage.get_job(job.id)

    connection = connections[alias]
    assert not connection.in_atomic_block
    assert connection.get_autocommit()


def test_a_statement_running_past_the_timeout_is_cancelled(alias: str) -> None:
    connection = connections[alias]
    tx = Transactions(alias, vendor_for(connection), statement_timeout=timedelta(seconds=0.2))

    def slow() -> None:
        with connection.cursor() as cursor:
            cursor.execute(SLOW_STATEMENTS[connection.vendor])
            cursor.fetchall()

    with pytest.raises(DatabaseError):
        tx.write(slow)
    with pytest.raises(DatabaseError):
        tx.read(slow)


def test_sqlite_refuses_deferred_transactions_with_a_hint_that_says_what_to_set() -> None:
    (problem,) = SQLite().configuration_problems({"NAME": "db.sqlite3", "OPTIONS": {}})

    assert "IMMEDIATE" in problem.message
    assert '"OPTIONS": {"transaction_mode": "IMMEDIATE"}' in problem.hint
    assert ".md" not in problem.hint  # a pip-installed project has no docs folder


def test_mariadb_refuses_another_isolation_level_with_a_hint_that_says_what_to_set() -> None:
    (problem,) = MariaDB().configuration_problems({"OPTIONS": {"isolation_level": "serializable"}})

    assert "serializable" in problem.message
    assert '"isolation_level": "read committed"' in problem.hint


def test_the_test_databases_are_configured_as_the_storage_needs() -> None:
    for alias in ALIASES:
        assert configuration_problems(alias) == []


def test_a_setting_the_storage_cannot_work_with_fails_the_system_checks(settings: Any) -> None:
    settings.USE_TZ = False

    errors = [m for m in check_settings() if m.id == "millrace.E008"]

    assert errors and "USE_TZ" in errors[0].msg
    assert errors[0].hint is not None and "USE_TZ = True" in errors[0].hint
    assert ".md" not in errors[0].hint
