"""MariaDB (and MySQL, Django's ``mysql`` backend): ``SKIP LOCKED``, statements bounded
one by one with ``SET STATEMENT ... FOR``."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

from django.db import DatabaseError
from django.db.backends.base.base import BaseDatabaseWrapper

from millrace_django.storage.orm.vendors.base import ConfigurationProblem, Vendor

_MARIADB_BOUNDED = ("SELECT", "INSERT", "UPDATE", "DELETE")


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
