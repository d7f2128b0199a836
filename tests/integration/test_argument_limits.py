"""What every database is sent at enqueue: arguments without U+0000 and within
``MILLRACE["MAX_ARGUMENTS_BYTES"]``, refused the same way everywhere before the driver
sees them (PostgreSQL refuses U+0000 in ``jsonb``; MariaDB a statement over its
``max_allowed_packet``, 16 MiB by default).

Runs on SQLite, and on the PostgreSQL and MariaDB servers when configured
(``scripts/testdb.sh``); a missing server is skipped, except in CI, where it fails.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from django.conf import settings as django_settings

from millrace_django.clock import FakeClock
from millrace_django.contract import JobQuery
from millrace_django.engine import ArgumentsTooLarge, UnserializableArgument
from millrace_django.testing import JobRunner
from tests.conformance.django_harness import require_alias
from tests.unit.engine import sample_jobs

MIB = 1024 * 1024


def _database(alias: str, variable: str | None) -> Any:
    if alias not in django_settings.DATABASES:  # the test skips (fails in CI)
        return pytest.param((alias, variable), id=alias)
    marks = [pytest.mark.django_db(transaction=True, databases=[alias])]
    if alias != "default":
        marks.append(getattr(pytest.mark, alias))
    return pytest.param((alias, variable), marks=marks, id=alias)


DATABASES = [
    _database("default", None),
    _database("postgres", "MILLRACE_TEST_POSTGRES_URL"),
    _database("mariadb", "MILLRACE_TEST_MARIADB_URL"),
]


@pytest.fixture(params=DATABASES)
def runner(request: pytest.FixtureRequest, settings: Any) -> Iterator[JobRunner]:
    alias, variable = request.param
    if variable is not None:
        require_alias(alias, variable)
    settings.MILLRACE = {**settings.MILLRACE, "DATABASE": alias}
    runner = JobRunner.for_project(storage="orm", clock=FakeClock(datetime(2026, 1, 1, tzinfo=UTC)))
    with runner.installed():
        yield runner


def test_arguments_holding_a_nul_character_are_refused_at_enqueue(runner: JobRunner) -> None:
    with pytest.raises(UnserializableArgument, match=r"'order_id' contains the character U\+0000"):
        sample_jobs.send_confirmation.enqueue("order\x00-42")
    with pytest.raises(UnserializableArgument, match=r"\(at \['note'\]\)"):
        sample_jobs.spread.enqueue({"note": "a\x00b"})
    assert runner.storage.query_jobs(JobQuery()).items == []  # type: ignore[attr-defined]


def test_arguments_of_the_default_limit_are_stored_and_read_back(runner: JobRunner) -> None:
    text = "é" * (MIB // 6 - 20)  # each written as \\u00e9: just under 1 MiB of JSON
    job_id = sample_jobs.send_confirmation.enqueue(text)
    stored = runner.get(job_id)
    assert list(stored.invocation.args) == [text]


def test_arguments_over_the_limit_are_refused_before_the_driver_sees_them(
    runner: JobRunner,
) -> None:
    """17 MiB: over MariaDB's default packet, which answered OperationalError 1153."""
    with pytest.raises(ArgumentsTooLarge, match=r"over the limit of 1048576 bytes"):
        sample_jobs.send_confirmation.enqueue("x" * (17 * MIB))
    assert runner.storage.query_jobs(JobQuery()).items == []  # type: ignore[attr-defined]
