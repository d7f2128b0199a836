"""Database faults for the reliability scenarios, injected from the test process.

- :func:`terminate_backends`: ``pg_terminate_backend`` on the workers' sessions (what an
  administrator, a failover or a connection reaper does);
- :class:`CompletionBlocker`: a trigger that makes every write of a terminal state fail
  while it is switched on, leaving claims, lease renewals and everything else working
  (a worker that stays healthy while its completions cannot be written);
- :class:`TableLock`: ``LOCK TABLE ... IN ACCESS EXCLUSIVE MODE`` held by a connection
  of the test, so every statement touching the table waits (a database that hangs).

Each works on any PostgreSQL the test can reach as the application's role (the private
cluster of :mod:`tests.reliability.pgcluster`, or the shared server's test database).
"""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from types import TracebackType
from typing import Any, Self

import psycopg
from psycopg import sql

from millrace_django.contract import TERMINAL_JOB_STATES
from millrace_django.models import JOB_STATE_CODES, Job

WORKER_APPLICATION = "millrace-fault-worker"
"""The ``application_name`` the scenarios give worker processes (``OPTIONS``), so that
faults aimed at workers spare the test's own sessions."""

BLOCKED_MESSAGE = "millrace fault: completion writes are blocked"
"""What a blocked completion write fails with (in the worker's log)."""

_JOBS = Job._meta.db_table
_TERMINAL_CODES = sorted(JOB_STATE_CODES[state] for state in TERMINAL_JOB_STATES)


def connect(url: str) -> psycopg.Connection[Any]:
    """An autocommit connection of the test's own (not a worker's application name)."""
    return psycopg.connect(url, autocommit=True, application_name="millrace-fault-test")


_BY_WORKER = """
    SELECT split_part(application_name, ' ', 2)::int AS worker, {aggregate}
    FROM pg_stat_activity
    WHERE split_part(application_name, ' ', 1) = %s AND datname = current_database()
    GROUP BY worker
"""
"""Sessions grouped by the worker process that opened them: the harness's settings append
the process id to the ``application_name``."""


def _per_worker(url: str, aggregate: str, application: str) -> Counter[int]:
    with connect(url) as connection:
        rows = connection.execute(
            sql.SQL(_BY_WORKER).format(aggregate=sql.SQL(aggregate)), [application]
        ).fetchall()
    return Counter(dict(rows))


def worker_sessions(url: str, application: str = WORKER_APPLICATION) -> Counter[int]:
    """How many sessions each worker named ``application`` holds, by its process id."""
    return _per_worker(url, "count(*)", application)


def terminate_backends(url: str, application: str = WORKER_APPLICATION) -> Counter[int]:
    """Terminate every session of the workers named ``application`` on ``url``'s database
    (claim, acknowledgement, heartbeat and listener connections alike); how many each
    worker held, by its process id."""
    return _per_worker(url, "count(pg_terminate_backend(pid))", application)


class CompletionBlocker:
    """While on, every update that moves a job into a terminal state raises
    :data:`BLOCKED_MESSAGE`; nothing else is affected. A ``BEFORE UPDATE`` trigger reads
    a one-row switch table, so turning it on or off is one committed write."""

    _INSTALL = sql.SQL("""
CREATE TABLE IF NOT EXISTS reliability_fault_switch (blocked boolean NOT NULL);
INSERT INTO reliability_fault_switch SELECT false
    WHERE NOT EXISTS (SELECT FROM reliability_fault_switch);
CREATE OR REPLACE FUNCTION reliability_block_completion() RETURNS trigger AS $$
BEGIN
    IF (SELECT blocked FROM reliability_fault_switch) THEN
        RAISE EXCEPTION {message};
    END IF;
    RETURN NEW;
END $$ LANGUAGE plpgsql;
DROP TRIGGER IF EXISTS reliability_block_completion ON {jobs};
CREATE TRIGGER reliability_block_completion BEFORE UPDATE ON {jobs}
    FOR EACH ROW WHEN (NEW.state IN ({terminal}) AND OLD.state IS DISTINCT FROM NEW.state)
    EXECUTE FUNCTION reliability_block_completion();
""")
    _UNINSTALL = sql.SQL("""
DROP TRIGGER IF EXISTS reliability_block_completion ON {jobs};
DROP FUNCTION IF EXISTS reliability_block_completion();
DROP TABLE IF EXISTS reliability_fault_switch;
""")

    def __init__(self, url: str) -> None:
        self.url = url

    def install(self) -> None:
        with connect(self.url) as connection:
            connection.execute(
                self._INSTALL.format(
                    message=sql.Literal(BLOCKED_MESSAGE),
                    jobs=sql.Identifier(_JOBS),
                    terminal=sql.SQL(", ").join(sql.Literal(code) for code in _TERMINAL_CODES),
                )
            )

    def uninstall(self) -> None:
        with connect(self.url) as connection:
            connection.execute(self._UNINSTALL.format(jobs=sql.Identifier(_JOBS)))

    def block(self) -> None:
        self._switch(True)

    def unblock(self) -> None:
        self._switch(False)

    def _switch(self, blocked: bool) -> None:
        with connect(self.url) as connection:
            connection.execute("UPDATE reliability_fault_switch SET blocked = %s", [blocked])


class TableLock:
    """Holds ``ACCESS EXCLUSIVE`` on the jobs table while the block runs: every read or
    write of it waits (and times out under the storage's statement timeout).

    The holding session ends itself after ``at_most`` idle in its transaction, so a test
    that dies with the lock held cannot hang the database for the next one."""

    def __init__(self, url: str, *, at_most: timedelta = timedelta(minutes=2)) -> None:
        self.url = url
        self.at_most = at_most
        self._connection: psycopg.Connection[Any] | None = None

    def __enter__(self) -> Self:
        connection = connect(self.url)
        milliseconds = int(self.at_most.total_seconds() * 1000)
        connection.execute(
            sql.SQL("SET idle_in_transaction_session_timeout = {}").format(
                sql.Literal(milliseconds)
            )
        )
        connection.execute("BEGIN")
        connection.execute(
            sql.SQL("LOCK TABLE {} IN ACCESS EXCLUSIVE MODE").format(sql.Identifier(_JOBS))
        )
        self._connection = connection
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.close()  # ends the transaction: the lock is released
