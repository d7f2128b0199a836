"""Atomic jobs for the tests: each adds one to a counter row on the database it is given
(the storage's alias), in the job's own transaction. The counter table is created by
:func:`counter_table`, outside the migrations, on whichever test database needs it."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress

from django.db import DatabaseError, connections

from millrace_django import JobContext, job

TABLE = "millrace_test_counter"

during_job: Callable[[], None] | None = None
"""Called by :func:`bump` between its write and its return (a test's interference)."""


@job(atomic=True)
def bump(alias: str, name: str, fail: bool = False) -> None:
    """``UPDATE counter SET n = n + 1``, then raise if told to."""
    with connections[alias].cursor() as cursor:
        cursor.execute(f"UPDATE {TABLE} SET n = n + 1 WHERE name = %s", [name])
    if during_job is not None:
        during_job()
    if fail:
        raise RuntimeError("the job failed after its write")


@job(atomic=True)
def nothing() -> None:
    """An atomic job with no writes of its own: what its success alone costs."""


@job(atomic=True)
def bump_slowly(alias: str, name: str, seconds: float) -> None:
    """:func:`bump`, then ``seconds`` more inside the transaction (a long atomic job)."""
    bump(alias, name)
    time.sleep(seconds)


@job(atomic=True)
def bump_then_break(alias: str, name: str) -> None:
    """:func:`bump`, then a failed statement swallowed: on PostgreSQL the transaction
    is left aborted, so the job's success cannot be written."""
    bump(alias, name)
    with connections[alias].cursor() as cursor, suppress(DatabaseError):
        cursor.execute("SELECT * FROM millrace_no_such_table")


@contextmanager
def counter_table(alias: str, name: str) -> Iterator[None]:
    """A counter row ``name`` at 0 for the block (the table made if missing)."""
    with connections[alias].cursor() as cursor:
        cursor.execute(
            f"CREATE TABLE IF NOT EXISTS {TABLE} (name VARCHAR(50) PRIMARY KEY, n INTEGER NOT NULL)"
        )
        cursor.execute(f"DELETE FROM {TABLE} WHERE name = %s", [name])
        cursor.execute(f"INSERT INTO {TABLE} (name, n) VALUES (%s, 0)", [name])
    try:
        yield
    finally:
        with connections[alias].cursor() as cursor:
            cursor.execute(f"DELETE FROM {TABLE} WHERE name = %s", [name])


def count(alias: str, name: str) -> int:
    """The counter's committed value, as another connection would read it."""
    with connections[alias].cursor() as cursor:
        cursor.execute(f"SELECT n FROM {TABLE} WHERE name = %s", [name])
        (value,) = cursor.fetchone()
    return int(value)


@job(atomic=True)
def bump_and_checkpoint(alias: str, name: str, context: JobContext) -> None:
    """:func:`bump`, then a checkpoint (which an atomic job may not save)."""
    bump(alias, name)
    context.checkpoint(1)
