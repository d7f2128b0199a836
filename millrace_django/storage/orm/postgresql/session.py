"""The hot path's session driver: each statement prepared once per database session and
sent, where nothing else needs to see it, on the driver's connection with its parameters
hand-quoted as literals (one simple query, none of what a Django cursor costs per call);
through Django's cursor otherwise."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from functools import lru_cache
from typing import Any

from django.db import DatabaseError
from django.db.backends.base.base import BaseDatabaseWrapper

from millrace_django.storage.orm.postgresql.parameters import timestamp_text
from millrace_django.storage.orm.vendors.postgresql import (
    LOST_PREPARED_STATEMENT,
    CallSettings,
)


class Statement:
    """One hot statement: its SQL with ``%(name)s`` parameters, and the same SQL as a
    session's prepared statement (``$n`` parameters, typed) with its ``EXECUTE``."""

    def __init__(self, purpose: str, sql: str, parameters: Mapping[str, str]) -> None:
        self.sql = sql
        self.name = f"millrace_{purpose}_{hashlib.sha1(sql.encode()).hexdigest()[:10]}"
        body = sql
        for position, parameter in enumerate(parameters, start=1):
            body = body.replace(f"%({parameter})s", f"${position}")
        assert "%(" not in body, f"{purpose}: a parameter is not declared"
        types = ", ".join(parameters.values())
        self.prepare = f"PREPARE {self.name} ({types}) AS {body}"
        arguments = ", ".join(f"%({parameter})s" for parameter in parameters)
        self.execute = f"EXECUTE {self.name} ({arguments})"


@lru_cache(maxsize=1)
def _driver_timestamptz() -> Any:
    """The driver's own ``timestamptz`` loader (C where psycopg's binary build is in),
    looked up when a PostgreSQL session first needs it: psycopg is an optional
    dependency, and this module is imported whatever the database."""
    import psycopg
    from psycopg.pq import Format

    return psycopg.adapters.get_loader(psycopg.adapters.types["timestamptz"].oid, Format.TEXT)


class Session:
    """What the hot path keeps for one driver connection (one database session): the
    names of the statements prepared there, and the driver cursor it sends them on."""

    __slots__ = ("_cursor", "_zone", "prepared", "raw", "unsure")

    def __init__(self, raw: Any) -> None:
        self.raw = raw
        self.prepared: set[str] = set()
        self.unsure = False
        """Set when a message failed: the server runs none of a failed message's
        statements after the failing one, so which of its ``PREPARE``s ran is unknown,
        and the next call reads them back (believing one prepared that was not, or the
        reverse, made every later call fail, alternately one way and the other)."""
        self._cursor: Any = None
        self._zone: Any = None  # the time zone Django read timestamps in for _cursor

    def reread(self, connection: BaseDatabaseWrapper) -> None:
        """Take what the session has prepared from the server."""
        with connection.cursor() as cursor:
            cursor.execute("SELECT name FROM pg_prepared_statements")
            self.prepared = {name for (name,) in cursor.fetchall()}
        self.unsure = False

    def cursor(self, connection: BaseDatabaseWrapper) -> Any:
        """The session's driver cursor, made as Django makes its own (with the time zone
        of the timestamps it reads) once per time zone: not one cursor, and adapters
        map, per call.

        Django reads each ``timestamptz`` through a Python loader that sets the
        connection's time zone on the driver's result. In UTC, what Django sets by
        default, the driver's own loader already answers in UTC, at two fifths of the
        cost (a claim reads a few timestamps per job), so the cursor takes that."""
        zone = connection.timezone  # Django sets the session's to it (ensure_timezone)
        if self._cursor is None or zone is not self._zone:
            cursor = connection.create_cursor()
            if zone is UTC and self.raw.info.timezone is UTC:
                cursor.adapters.register_loader("timestamptz", _driver_timestamptz())
            self._cursor, self._zone = cursor, zone
        return self._cursor


def session_of(connection: BaseDatabaseWrapper) -> Session:
    """The hot path's state for ``connection``'s current session (a new driver connection
    starts afresh)."""
    raw = connection.connection
    session: Session | None = getattr(connection, "_millrace_session", None)
    if session is None or session.raw is not raw:
        session = Session(raw)
        setattr(connection, "_millrace_session", session)  # noqa: B010 (not a Django field)
    return session


def _sqlstate(error: DatabaseError) -> str | None:
    return getattr(error.__cause__, "sqlstate", None)


_PARAMETER = re.compile(r"%\((\w+)\)s")


@lru_cache(maxsize=64)
def _template(sql: str) -> str:
    """``sql`` with its ``%(name)s`` parameters as :meth:`str.format_map` fields."""
    return _PARAMETER.sub(r"{\1}", sql.replace("{", "{{").replace("}", "}}"))


def _literal(value: object) -> str:
    """``value`` as a quoted SQL literal where ``standard_conforming_strings`` is on (a
    backslash is a plain character): its text, read as the prepared statement's
    parameter type says."""
    if value is None:
        return "NULL"
    text = timestamp_text(value) if isinstance(value, datetime) else str(value)
    return "'" + text.replace("'", "''") + "'"


def _sent_directly(
    connection: BaseDatabaseWrapper,
    session: Session,
    parts: Sequence[str],
    params: Mapping[str, Any],
    read: bool,
    trailing: int = 0,
) -> list[tuple[Any, ...]] | None:
    """The rows of the last of ``parts`` but ``trailing`` (if ``read``), sent with their
    parameters spelled as literals on ``session``'s driver cursor, as one simple query;
    errors are Django's.

    This skips what a Django cursor costs per call (a new driver cursor, the parameters'
    conversion by the driver, the execute-wrapper chain), so it is done only where nothing
    needs to see the statement: ``None`` (send it through Django's cursor) while Django
    logs queries, while an execute wrapper other than the storage call's
    :class:`CallSettings` watches, where the server reads literals otherwise, or for
    text the driver refuses (a NUL character).
    """
    if connection.queries_logged:
        return None
    settings: CallSettings | None = None
    for wrapper in connection.execute_wrappers:
        if settings is not None or not isinstance(wrapper, CallSettings):
            return None
        settings = wrapper
    if session.raw.pgconn.parameter_status(b"standard_conforming_strings") != b"on":
        return None
    literals = {name: _literal(value) for name, value in params.items()}
    sql = "; ".join([_template(part).format_map(literals) for part in parts])
    if "\x00" in sql:
        return None
    if settings is not None:
        sql = settings.take(connection) + sql
    connection.validate_thread_sharing()
    connection.validate_no_broken_transaction()
    cursor = session.cursor(connection)
    with connection.wrap_database_errors:
        cursor.execute(sql)
        return _rows_of(cursor, trailing) if read else []


def _sent(
    connection: BaseDatabaseWrapper,
    parts: Sequence[str],
    params: Mapping[str, Any],
    read: bool,
    trailing: int = 0,
) -> list[tuple[Any, ...]]:
    """The rows of the last of ``parts`` but ``trailing`` (if ``read``), sent in one
    message through Django's cursor."""
    with connection.cursor() as cursor:
        cursor.execute("; ".join(parts), params)
        return _rows_of(cursor, trailing) if read else []


def _rows_of(cursor: Any, trailing: int) -> list[tuple[Any, ...]]:
    """The rows of the statement ``cursor`` ran ``trailing`` statements before its last.

    Whether a result has rows is read from its column count, not from
    ``cursor.description``, which builds a column object per column on every access
    (a tenth of a millisecond per claim, the job's two dozen columns)."""
    results: list[list[tuple[Any, ...]]] = []
    while True:
        result = cursor.pgresult
        results.append(cursor.fetchall() if result is not None and result.nfields else [])
        if not cursor.nextset():
            return results[-1 - trailing]


class Driver:
    """How the hot path's statements reach the session: in one message where
    ``several_statements`` allows it, prepared once per session where ``prepare`` does
    too (see :class:`~millrace_django.storage.orm.postgresql.hotpath.PostgresHotPath`)."""

    __slots__ = ("prepare", "several_statements")

    def __init__(self, *, several_statements: bool, prepare: bool) -> None:
        self.several_statements = several_statements
        self.prepare = prepare and several_statements

    def run(
        self,
        connection: BaseDatabaseWrapper,
        statement: Statement,
        params: Mapping[str, Any],
        before: str = "",
        after: Statement | None = None,
        *,
        read: bool = True,
    ) -> list[tuple[Any, ...]]:
        """The rows of ``statement`` (if ``read``: reading them costs), run after
        ``before`` and before ``after`` (in the same message where messages can carry
        several statements). A prepared statement is sent on the driver's connection
        directly where nothing else needs to see it (:func:`_sent_directly`): its
        parameters' types are the statement's own."""
        statements = [statement] if after is None else [statement, after]
        if not self.several_statements:
            with connection.cursor() as cursor:
                if before:
                    cursor.execute(before, params)
                cursor.execute(statement.sql, params)
                rows: list[tuple[Any, ...]] = cursor.fetchall() if read else []
                if after is not None:
                    cursor.execute(after.sql, params)
                return rows
        if not self.prepare:
            parts = [before] if before else []
            parts += [sent.sql for sent in statements]
            return _sent(connection, parts, params, read, trailing=len(statements) - 1)
        connection.close_if_health_check_failed()  # as Django does before a cursor
        connection.ensure_connection()
        session = session_of(connection)
        if session.unsure:
            session.reread(connection)
        parts = [before] if before else []
        trailing = 0  # statements after ``statement``'s EXECUTE
        preparing = False
        for sent in statements:
            if sent.name not in session.prepared:
                session.prepared.add(sent.name)  # PREPARE is not undone by a rollback
                parts.append(sent.prepare)
                preparing = True
                trailing += sent is not statement
            parts.append(sent.execute)
            trailing += sent is not statement
        try:
            direct = _sent_directly(connection, session, parts, params, read, trailing)
            return (
                direct if direct is not None else _sent(connection, parts, params, read, trailing)
            )
        except DatabaseError as error:
            # A duplicate (42P05) can only come from a PREPARE, so ``preparing`` covers it.
            if preparing or _sqlstate(error) == LOST_PREPARED_STATEMENT:
                session.unsure = True
            raise
