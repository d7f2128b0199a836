"""SQLite: writers serialize on ``BEGIN IMMEDIATE``, statements are bounded by a progress
handler."""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

from django.db.backends.base.base import BaseDatabaseWrapper

from millrace_django.storage.orm.vendors.base import ConfigurationProblem, Vendor

_SQLITE_PROGRESS_STEPS = 10_000


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
