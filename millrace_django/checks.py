"""System checks: a bad ``MILLRACE`` setting fails ``manage.py check`` with an id and hint."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from django.apps import AppConfig
from django.conf import settings
from django.core.checks import CheckMessage, Error, register
from django.db import connections

from millrace_django.conf import InvalidSettings, MillraceSettings, parse_settings
from millrace_django.engine.atomic import atomic_refusal
from millrace_django.engine.registry import registered_jobs
from millrace_django.storage import PROVIDERS, InvalidProvider

SQLITE_BUSY_TIMEOUT = 5.0
"""Seconds a SQLite write waits for the writer lock when ``OPTIONS`` sets no ``timeout``
(the default of Python's ``sqlite3.connect``)."""


@register("millrace")
def check_settings(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    try:
        parsed = parse_settings(getattr(settings, "MILLRACE", None), settings.DATABASES.keys())
    except InvalidSettings as invalid:
        return [Error(p.message, hint=p.hint, id=p.id) for p in invalid.problems]
    if parsed.storage not in PROVIDERS:
        problems = _provider_problems()
        if problems:
            return problems
    if parsed.storage != "orm":
        return _atomic_job_problems()
    from millrace_django.storage.orm import configuration_problems

    return [
        Error(problem.message, hint=problem.hint, id="millrace.E008")
        for problem in configuration_problems(parsed.database)
    ] + _sqlite_lease_problems(parsed)


def _provider_problems() -> list[CheckMessage]:
    """A third-party provider is built here, once, as the process will use it: its
    factory must make a complete provider (see ``storage.open_storage``)."""
    from millrace_django import assembly

    try:
        assembly.storage()
    except InvalidProvider as error:
        return [
            Error(
                f"MILLRACE['STORAGE'] is invalid: {error}.",
                hint="A provider factory takes the clock and the keywords alias and "
                "statement_timeout, and returns an object implementing JobStorage, "
                "WorkflowStorage and MonitoringStorage (millrace_django.contract); see "
                "docs/writing-a-storage-provider.md.",
                id="millrace.E013",
            )
        ]
    return []


def _sqlite_lease_problems(parsed: MillraceSettings) -> list[CheckMessage]:
    """On SQLite every write (a lease renewal, a completion) may wait up to the busy
    timeout for the single writer lock. A renewal starts at most one heartbeat after the
    last one; if its wait could outlast the lease, another worker may reclaim a job that
    a healthy worker still runs, or has finished and is writing, and run it again."""
    database = connections[parsed.database]
    if database.vendor != "sqlite":
        return []
    options = database.settings_dict.get("OPTIONS") or {}
    busy = timedelta(seconds=float(options.get("timeout", SQLITE_BUSY_TIMEOUT)))
    if parsed.lease > parsed.heartbeat + busy:
        return []
    return [
        Error(
            f"MILLRACE['LEASE'] ({parsed.lease}) must be longer than MILLRACE['HEARTBEAT'] "
            f"({parsed.heartbeat}) plus the SQLite busy timeout of database "
            f"{parsed.database!r} (OPTIONS['timeout'], {busy}).",
            hint="On SQLite a lease renewal or a completion may wait that long for the "
            "single writer lock; a lease that ends meanwhile lets another worker run the "
            "job again. Lengthen LEASE (several heartbeats plus the busy timeout), or "
            "shorten HEARTBEAT or OPTIONS['timeout'].",
            id="millrace.E010",
        )
    ]


def _atomic_job_problems() -> list[CheckMessage]:
    """Atomic jobs need a storage that joins their transaction (the memory storage has
    none). Only the jobs imported by the time the checks run are seen here; enqueueing
    any other refuses it just as clearly."""
    from millrace_django import assembly

    storage = assembly.storage()
    return [
        Error(
            str(refusal),
            hint="Atomic jobs commit their writes with their success in one database "
            "transaction: set MILLRACE['STORAGE'] = 'orm', or drop atomic=True.",
            id="millrace.E012",
        )
        for definition in registered_jobs().values()
        if (refusal := atomic_refusal(definition, storage, None)) is not None
    ]
