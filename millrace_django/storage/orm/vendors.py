"""What differs between databases, and nothing else: settings the provider relies on,
how a statement is bounded in time, which errors mean "replay", and the hot path.

Everything not here is the shared ORM path.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import timedelta
from typing import Any, ClassVar

from django.db import DatabaseError
from django.db.backends.base.base import BaseDatabaseWrapper

from millrace_django.storage.orm.hotpath import HotPath, OrmHotPath
from millrace_django.storage.orm.postgresql import PostgresHotPath

_SQLITE_PROGRESS_STEPS = 10_000
_MARIADB_BOUNDED = ("SELECT", "INSERT", "UPDATE", "DELETE")


class Vendor:
    """The portable defaults; subclasses override only what their database needs."""

    reads_in_transaction: ClassVar[bool] = False
    """Whether reads need a transaction for their statements to be bounded."""

    hot_path: ClassVar[HotPath] = OrmHotPath()
    """The claim and acknowledgement statements (stateless)."""

    def configuration_problems(self, settings: Mapping[str, Any]) -> list[str]:
        """Why this alias's settings would break the provider's guarantees, if they do."""
        return []

    @contextmanager
    def statement_timeout(
        self, connection: BaseDatabaseWrapper, timeout: timedelta
    ) -> Iterator[None]:
        """Bound every statement run inside the block (one storage call)."""
        yield

    def begin(self, connection: BaseDatabaseWrapper, timeout: timedelta) -> None:
        """First statement of a storage-owned transaction."""

    def is_transient(self, error: DatabaseError) -> bool:
        """Whether ``error`` means "replay the whole transaction" (deadlock,
        serialization failure)."""
        return False


class PostgreSQL(Vendor):
    """``FOR UPDATE SKIP LOCKED``; ``SET LOCAL statement_timeout`` per transaction, so
    nothing leaks into the application's use of a shared alias; one-statement claim and
    acknowledgement."""

    reads_in_transaction = True
    _TRANSIENT_SQLSTATES = frozenset({"40001", "40P01"})  # serialization_failure, deadlock

    hot_path = PostgresHotPath()

    def begin(self, connection: BaseDatabaseWrapper, timeout: timedelta) -> None:
        milliseconds = max(1, int(timeout.total_seconds() * 1000))
        with connection.cursor() as cursor:
            cursor.execute("SELECT set_config('statement_timeout', %s, true)", [str(milliseconds)])

    def is_transient(self, error: DatabaseError) -> bool:
        return getattr(error.__cause__, "sqlstate", None) in self._TRANSIENT_SQLSTATES


class SQLite(Vendor):
    """Writers serialize on ``BEGIN IMMEDIATE`` (so claims never need to skip locks and
    look-then-insert is atomic); readers stay outside transactions, which under WAL never
    block the writer. Lock waits are bounded by the busy timeout, statements by a
    progress handler."""

    def configuration_problems(self, settings: Mapping[str, Any]) -> list[str]:
        mode = settings.get("OPTIONS", {}).get("transaction_mode")
        if str(mode).upper() != "IMMEDIATE":
            return [
                'OPTIONS["transaction_mode"] must be "IMMEDIATE": deferred transactions '
                "deadlock when concurrent readers upgrade to writers"
            ]
        return []

    @contextmanager
    def statement_timeout(
        self, connection: BaseDatabaseWrapper, timeout: timedelta
    ) -> Iterator[None]:
        seconds = timeout.total_seconds()

        def bounded(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
            raw = context["connection"].connection
            deadline = time.monotonic() + seconds
            raw.set_progress_handler(lambda: time.monotonic() > deadline, _SQLITE_PROGRESS_STEPS)
            try:
                return execute(sql, params, many, context)
            finally:
                raw.set_progress_handler(None, 0)

        with connection.execute_wrapper(bounded):
            yield


class MariaDB(Vendor):
    """``FOR UPDATE SKIP LOCKED`` (10.6+); each statement is prefixed with ``SET
    STATEMENT max_statement_time=..., innodb_lock_wait_timeout=... FOR`` so the bound
    applies to this statement only. Requires READ COMMITTED (Django's default)."""

    _TRANSIENT_CODES = frozenset({1213, 1020})  # deadlock; record changed since last read

    def configuration_problems(self, settings: Mapping[str, Any]) -> list[str]:
        isolation = settings.get("OPTIONS", {}).get("isolation_level", "read committed")
        if str(isolation).lower() != "read committed":
            return [
                f'OPTIONS["isolation_level"] is {isolation!r}; Millrace needs "read committed" '
                "so a replayed look-up sees rows committed meanwhile"
            ]
        return []

    @contextmanager
    def statement_timeout(
        self, connection: BaseDatabaseWrapper, timeout: timedelta
    ) -> Iterator[None]:
        seconds = timeout.total_seconds()
        prefix = (
            f"SET STATEMENT max_statement_time={seconds:g}, "
            f"innodb_lock_wait_timeout={max(1, round(seconds))} FOR "
        )

        def bounded(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
            if sql.lstrip()[:6].upper() in _MARIADB_BOUNDED:
                sql = prefix + sql
            return execute(sql, params, many, context)

        if getattr(connection, "mysql_is_mariadb", False):
            with connection.execute_wrapper(bounded):
                yield
        else:
            yield

    def is_transient(self, error: DatabaseError) -> bool:
        return bool(error.args) and error.args[0] in self._TRANSIENT_CODES


class SQLServer(Vendor):
    """``skip_locked`` renders ``WITH (ROWLOCK, UPDLOCK, READPAST)``; lock waits are
    bounded per transaction with ``SET LOCK_TIMEOUT``. Compiled, not run, in our tests."""

    _TRANSIENT_MARKERS = ("40001", "1205")  # deadlock victim

    def begin(self, connection: BaseDatabaseWrapper, timeout: timedelta) -> None:
        milliseconds = max(1, int(timeout.total_seconds() * 1000))
        with connection.cursor() as cursor:
            cursor.execute(f"SET LOCK_TIMEOUT {milliseconds}")

    def is_transient(self, error: DatabaseError) -> bool:
        text = " ".join(str(arg) for arg in error.args)
        return any(marker in text for marker in self._TRANSIENT_MARKERS)


_VENDORS: dict[str, type[Vendor]] = {
    "postgresql": PostgreSQL,
    "sqlite": SQLite,
    "mysql": MariaDB,
    "microsoft": SQLServer,
}


def vendor_for(connection: BaseDatabaseWrapper) -> Vendor:
    """The strategy for ``connection``'s database (the portable one if unknown)."""
    return _VENDORS.get(connection.vendor, Vendor)()
