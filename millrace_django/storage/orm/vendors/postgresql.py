"""PostgreSQL: ``SKIP LOCKED``, statements bounded by ``SET LOCAL statement_timeout``
sent with the statement they bound (with ``plan_cache_mode``, so that prepared hot
statements keep their generic plans), wake-up hints by ``NOTIFY``."""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager, nullcontext
from datetime import timedelta
from typing import Any

from django.db import DatabaseError
from django.db.backends.base.base import BaseDatabaseWrapper

from millrace_django.storage.orm.notify import PostgresWakeups, Wakeups
from millrace_django.storage.orm.vendors.base import Vendor

LOST_PREPARED_STATEMENT = "26000"
"""SQLSTATE of an ``EXECUTE`` whose prepared statement the session does not have (a
pooler moved us to another server connection, or someone ran ``DEALLOCATE``): the
storage reads back what the session has prepared and the call is replayed."""
DUPLICATE_PREPARED_STATEMENT = "42P05"


class PostgreSQL(Vendor):
    """``FOR UPDATE SKIP LOCKED``; hand-written hot statements
    (:mod:`millrace_django.storage.orm.postgresql`).

    Statements are bounded by ``SET LOCAL statement_timeout``, sent in the same message
    as the statement it bounds (``SET LOCAL ...; <statement>``: one round trip, and the
    setting ends with that transaction, so nothing leaks into the application's use of
    a shared alias). A storage call that is one statement runs in autocommit (the
    message is its own implicit transaction: no ``BEGIN``/``COMMIT`` round trips); one
    of several statements runs in a transaction whose first statement carries the
    prefix (:class:`CallSettings`, which the hot path also reads for the statements it
    sends without a Django cursor). The same prefix keeps the generic plans of the
    hot path's prepared statements. That needs Django's default client-side
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
        self.prepare = prepare
        """Whether the hot statements may be prepared once per session: not where a
        transaction-mode pooler may hand us another server connection at any time."""
        self.reads_in_transaction = not client_binding
        self.autocommit_statements = client_binding

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
        return connection.execute_wrapper(CallSettings(_milliseconds(timeout)))

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


class CallSettings:
    r"""The ``SET LOCAL``\ s of one storage call: the statement timeout that bounds its
    statements, and generic plans for the hot path's prepared statements. They prefix
    each statement sent in autocommit (its message is its own transaction), and the
    first one only in a transaction (the settings last until the transaction ends).

    Generic plans: left to choose, the server plans a prepared statement afresh at
    every execution whose generic plan's estimate (a ``LIMIT`` or an array of unknown
    size) does not beat a custom plan's, and planning the claim's CTEs cost more server
    time than running them (a no-op drain spent 33 µs of server CPU per job so, 21 µs
    with the generic plans). Each hot statement has one sane plan, index probes
    whatever its parameters, so the generic one is kept; it is made again when the
    table's statistics change (an analyze invalidates it). The ORM's statements are not
    prepared under client-side binding, so the setting leaves them as they were.

    Installed as Django's execute wrapper for the statements sent through Django's
    cursors; the hot path, which sends its statements on the driver's connection itself
    where nothing else needs to see them, takes the prefix with :meth:`take`.
    """

    def __init__(self, milliseconds: int) -> None:
        settings = [f"statement_timeout = {milliseconds}", "plan_cache_mode = force_generic_plan"]
        self.prefix = "".join(f"SET LOCAL {setting}; " for setting in settings)
        self._results = len(settings)
        self._bounded_transaction = False

    def take(self, connection: BaseDatabaseWrapper) -> str:
        """The prefix the next statement on ``connection`` needs (empty once the current
        transaction is bounded)."""
        in_transaction = connection.in_atomic_block
        if in_transaction and self._bounded_transaction:
            return ""
        self._bounded_transaction = in_transaction
        return self.prefix

    def __call__(
        self, execute: Any, sql: str, params: Any, many: bool, context: Mapping[str, Any]
    ) -> Any:
        prefix = self.take(context["connection"])
        if not prefix:
            return execute(sql, params, many, context)
        raw = context["cursor"].cursor
        if many:  # executemany cannot carry a prefix
            if self._bounded_transaction:
                raw.execute(prefix)
            return execute(sql, params, many, context)
        result = execute(prefix + sql, params, many, context)
        for _ in range(self._results):  # past the SETs' results, to the statement's
            raw.nextset()
        return result
