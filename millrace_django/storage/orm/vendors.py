"""What differs between databases, and nothing else: settings the provider relies on,
how a statement is bounded in time, which errors mean "replay", how wake-up hints
travel, how uuid ties sort, how to read the server's clock, and the hot path.

Everything not here is the shared ORM path.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Mapping
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from uuid import UUID

from django.db import DatabaseError
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import CharField, Expression, F, Func, Value
from django.db.models.functions import Cast

from millrace_django.storage.orm.hotpath import HotPath, OrmHotPath
from millrace_django.storage.orm.notify import LocalWakeups, PostgresWakeups, Wakeups
from millrace_django.storage.orm.postgresql import (
    DUPLICATE_PREPARED_STATEMENT,
    LOST_PREPARED_STATEMENT,
    PostgresHotPath,
    StatementTimeout,
)

_SQLITE_PROGRESS_STEPS = 10_000
_MARIADB_BOUNDED = ("SELECT", "INSERT", "UPDATE", "DELETE")
_BINARY_COLLATION = "Latin1_General_100_BIN2"


@dataclass(frozen=True, slots=True)
class ConfigurationProblem:
    """A database setting that would break the provider's guarantees, and what to set
    instead (said in full: a pip-installed project has no docs folder to point at)."""

    message: str
    hint: str


class Vendor:
    """The portable defaults; subclasses override only what their database needs.
    Internal to the ORM provider (chosen by :func:`vendor_for`), not an extension point."""

    reads_in_transaction: bool = False
    """Whether reads need a transaction for their statements to be bounded."""

    autocommit_statements: bool = False
    """Whether a storage call that is one statement may run it alone in autocommit
    (bounded all the same), instead of inside a transaction of its own."""

    hot_path: HotPath = OrmHotPath()
    """The claim, acknowledgement and insert statements."""

    current_time_sql: str | None = None
    """A query of the server's clock now, as a UTC timestamp, for nodes to calibrate
    their clocks to it; ``None`` where the database runs on this machine's clock (or
    the vendor is unknown: nothing is calibrated)."""

    @classmethod
    def for_connection(cls, connection: BaseDatabaseWrapper) -> Vendor:
        """The strategy for ``connection`` (most need nothing from it)."""
        return cls()

    def configuration_problems(self, settings: Mapping[str, Any]) -> list[ConfigurationProblem]:
        """Why this alias's settings would break the provider's guarantees, if they do."""
        return []

    def statement_timeout(
        self, connection: BaseDatabaseWrapper, timeout: timedelta
    ) -> AbstractContextManager[object]:
        """Bound every statement run inside the block (one storage call)."""
        return nullcontext()

    def begin(self, connection: BaseDatabaseWrapper, timeout: timedelta) -> None:
        """First statement of a storage-owned transaction."""

    def is_transient(self, error: DatabaseError) -> bool:
        """Whether ``error`` means "replay the whole transaction" (deadlock,
        serialization failure)."""
        return False

    def wakeups(self, alias: str, channel: str) -> Wakeups:
        """How storage calls on ``alias`` announce the jobs they enqueue: in-process,
        after commit, unless the database has a channel of its own."""
        return LocalWakeups(alias)

    def id_order(self, field: str) -> str | Expression:
        """What to order by (and compare with :meth:`id_bound`) so that uuid column
        ``field`` sorts in RFC 4122 byte order, as the contract's tie-breaks require:
        the column itself where the database stores uuids so that they sort that way."""
        return field

    def id_bound(self, value: UUID) -> Any:
        """``value`` as :meth:`id_order`'s expression sees it."""
        return value


class PostgreSQL(Vendor):
    """``FOR UPDATE SKIP LOCKED``; hand-written hot statements (:mod:`.postgresql`).

    Statements are bounded by ``SET LOCAL statement_timeout``, sent in the same message
    as the statement it bounds (``SET LOCAL ...; <statement>``: one round trip, and the
    setting ends with that transaction, so nothing leaks into the application's use of
    a shared alias). A storage call that is one statement runs in autocommit (the
    message is its own implicit transaction: no ``BEGIN``/``COMMIT`` round trips); one
    of several statements runs in a transaction whose first statement carries the
    prefix (:class:`~.postgresql.StatementTimeout`, which the hot path also reads for the
    statements it sends without a Django cursor). That needs Django's default client-side
    binding cursors; with ``OPTIONS["server_side_binding"]`` (which cannot send two
    statements at once) every call runs in a transaction that starts with
    ``set_config``, one round trip more."""

    current_time_sql = "SELECT clock_timestamp()"  # not now(): the transaction's start

    _TRANSIENT_SQLSTATES = frozenset(
        {
            "40001",  # serialization_failure
            "40P01",  # deadlock_detected
            LOST_PREPARED_STATEMENT,  # the session is not the one we prepared in
            DUPLICATE_PREPARED_STATEMENT,  # ... or it is one we prepared in before
        }
    )

    def __init__(self, *, client_binding: bool = True, prepare: bool = True) -> None:
        self.client_binding = client_binding
        self.reads_in_transaction = not client_binding
        self.autocommit_statements = client_binding
        self.hot_path = PostgresHotPath(several_statements=client_binding, prepare=prepare)

    @classmethod
    def for_connection(cls, connection: BaseDatabaseWrapper) -> Vendor:
        settings = connection.settings_dict
        return cls(
            client_binding=settings.get("OPTIONS", {}).get("server_side_binding") is not True,
            prepare=not settings.get("DISABLE_SERVER_SIDE_CURSORS"),
        )

    def statement_timeout(
        self, connection: BaseDatabaseWrapper, timeout: timedelta
    ) -> AbstractContextManager[object]:
        if not self.client_binding or connection.in_atomic_block:
            return nullcontext()  # a caller's transaction keeps its own settings
        return connection.execute_wrapper(StatementTimeout(_milliseconds(timeout)))

    def begin(self, connection: BaseDatabaseWrapper, timeout: timedelta) -> None:
        if self.client_binding:
            return  # the first statement carries the bound
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT set_config('statement_timeout', %s, true)", [str(_milliseconds(timeout))]
            )

    def is_transient(self, error: DatabaseError) -> bool:
        return getattr(error.__cause__, "sqlstate", None) in self._TRANSIENT_SQLSTATES

    def wakeups(self, alias: str, channel: str) -> Wakeups:
        return PostgresWakeups(alias, channel)


def _milliseconds(timeout: timedelta) -> int:
    return max(1, int(timeout.total_seconds() * 1000))


class SQLite(Vendor):
    """Writers serialize on ``BEGIN IMMEDIATE`` (so claims never need to skip locks and
    look-then-insert is atomic); readers stay outside transactions, which under WAL never
    block the writer. Lock waits are bounded by the busy timeout, statements by a
    progress handler."""

    def configuration_problems(self, settings: Mapping[str, Any]) -> list[ConfigurationProblem]:
        mode = settings.get("OPTIONS", {}).get("transaction_mode")
        if str(mode).upper() != "IMMEDIATE":
            return [
                ConfigurationProblem(
                    'OPTIONS["transaction_mode"] must be "IMMEDIATE": deferred transactions '
                    "deadlock when concurrent readers upgrade to writers",
                    'In this database\'s DATABASES entry set "OPTIONS": {"transaction_mode": '
                    '"IMMEDIATE"} (Django 5.1 or newer). Also recommended there: "timeout": '
                    '30 and "init_command": "PRAGMA journal_mode=WAL; PRAGMA '
                    'synchronous=NORMAL".',
                )
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

    current_time_sql = "SELECT UTC_TIMESTAMP(6)"

    def configuration_problems(self, settings: Mapping[str, Any]) -> list[ConfigurationProblem]:
        isolation = settings.get("OPTIONS", {}).get("isolation_level", "read committed")
        if str(isolation).lower() != "read committed":
            return [
                ConfigurationProblem(
                    f'OPTIONS["isolation_level"] is {isolation!r}; Millrace needs '
                    '"read committed" so a replayed look-up sees rows committed meanwhile',
                    'In this database\'s DATABASES entry set "OPTIONS": {"isolation_level": '
                    '"read committed"} (Django\'s default for MariaDB and MySQL), or leave '
                    "isolation_level out.",
                )
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
    """``skip_locked`` renders ``WITH (ROWLOCK, UPDLOCK, READPAST)``. Statements are
    bounded by the driver's query timeout (set for the storage call, then restored), lock
    waits by ``SET LOCK_TIMEOUT`` at the start of each storage-owned transaction (a
    session setting: it stays on the connection afterwards). Uuid ties never sort in
    ``uniqueidentifier`` order (see :meth:`native_uuids`). Compiled, not run, in our
    tests unless ``MILLRACE_TEST_SQLSERVER_URL`` names a server."""

    _TRANSIENT_MARKERS = ("40001", "1205")  # deadlock victim (not 1222, a lock timeout)

    current_time_sql = "SELECT SYSUTCDATETIME()"

    def __init__(self, *, uuid_column: str = "char(32)") -> None:
        self.uuid_column = uuid_column

    @classmethod
    def for_connection(cls, connection: BaseDatabaseWrapper) -> Vendor:
        return cls(uuid_column=str(connection.data_types.get("UUIDField", "char(32)")))

    @property
    def native_uuids(self) -> bool:
        """Whether uuids are ``uniqueidentifier`` columns, which sort in a mixed-endian
        layout of their bytes (mssql-django stores them as ``char(32)`` lowercase hex,
        which sorts in byte order: digits before ``a-f``)."""
        return self.uuid_column.lower() == "uniqueidentifier"

    @contextmanager
    def statement_timeout(
        self, connection: BaseDatabaseWrapper, timeout: timedelta
    ) -> Iterator[None]:
        connection.ensure_connection()
        raw = connection.connection
        previous = raw.timeout
        raw.timeout = max(1, math.ceil(timeout.total_seconds()))
        try:
            yield
        finally:
            if connection.connection is raw:
                raw.timeout = previous

    def begin(self, connection: BaseDatabaseWrapper, timeout: timedelta) -> None:
        milliseconds = max(1, int(timeout.total_seconds() * 1000))
        with connection.cursor() as cursor:
            cursor.execute(f"SET LOCK_TIMEOUT {milliseconds}")

    def is_transient(self, error: DatabaseError) -> bool:
        text = " ".join(str(arg) for arg in error.args)
        return any(marker in text for marker in self._TRANSIENT_MARKERS)

    def id_order(self, field: str) -> str | Expression:
        if not self.native_uuids:
            return field  # hex text: the column's own order, so its indexes serve
        return _canonical_text(F(field))

    def id_bound(self, value: UUID) -> Any:
        if not self.native_uuids:
            return value
        return _binary(Value(str(value).upper(), output_field=CharField(max_length=36)))


def _canonical_text(uuid: F) -> Expression:
    """A uuid column's canonical text (upper case, as SQL Server casts it), compared byte
    for byte: RFC 4122 order. Never ``CAST(... AS binary(16))``, which keeps the
    mixed-endian layout."""
    return _binary(Cast(uuid, CharField(max_length=36)))


def _binary(text: Expression) -> Expression:
    """``text COLLATE Latin1_General_100_BIN2`` (not Django's ``Collate``, which brackets
    the collation name; SQL Server takes it bare)."""
    return Func(
        text,
        template=f"%(expressions)s COLLATE {_BINARY_COLLATION}",
        output_field=CharField(max_length=36),
    )


_VENDORS: dict[str, type[Vendor]] = {
    "postgresql": PostgreSQL,
    "sqlite": SQLite,
    "mysql": MariaDB,
    "microsoft": SQLServer,
}


def vendor_for(connection: BaseDatabaseWrapper) -> Vendor:
    """The strategy for ``connection``'s database (the portable one if unknown)."""
    return _VENDORS.get(connection.vendor, Vendor).for_connection(connection)
