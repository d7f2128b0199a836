"""Builds the configured clock, storage and job client, and installs the client as the
default.

The engine's decorators run at import time, long before settings are read; the app
config calls :func:`install` once Django is ready, and again whenever a test overrides
``MILLRACE`` or ``DATABASES``.
"""

from __future__ import annotations

from functools import cache

from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.dispatch import receiver
from django.utils.module_loading import import_string

from millrace_django.child_setup import django_child
from millrace_django.clock import Clock, CorrectedClock, DatabaseTime
from millrace_django.conf import InvalidSettings, get_settings
from millrace_django.contract import Storage
from millrace_django.engine.client import JobClient
from millrace_django.engine.default_client import set_default_client
from millrace_django.runtime import ClockSync
from millrace_django.runtime.isolation import set_child_setup
from millrace_django.storage import InvalidProvider, open_storage


@cache
def clock() -> Clock:
    """The process's clock: ``MILLRACE['CLOCK']``, wrapped in a :class:`CorrectedClock`
    unless ``MILLRACE['CLOCK_SYNC']`` is off (its offset stays zero until a worker or
    scheduler in this process measures it, see :func:`clock_sync`)."""
    settings = get_settings()
    source = import_string(settings.clock)()
    if not isinstance(source, Clock):
        raise ImproperlyConfigured(
            f"MILLRACE['CLOCK'] {settings.clock!r} made {source!r}, which has no now()"
        )
    return CorrectedClock(source) if settings.clock_sync else source


@cache
def clock_sync() -> ClockSync | None:
    """What calibrates :func:`clock` to the database's clock in this process (workers and
    schedulers run it; a health check may read ``clock_sync().latest`` or measure with
    ``clock_sync().sync()``). ``None`` when ``MILLRACE['CLOCK_SYNC']`` is off or the
    storage cannot read its database's clock (the memory storage)."""
    corrected, database = clock(), storage()
    if not isinstance(corrected, CorrectedClock) or not isinstance(database, DatabaseTime):
        return None
    return ClockSync(corrected, database, warn_beyond=get_settings().clock_skew_warning)


@cache
def storage() -> Storage:
    """The storage ``MILLRACE`` configures (one per process)."""
    settings = get_settings()
    return open_storage(
        settings.storage,
        alias=settings.database,
        clock=clock(),
        statement_timeout=settings.statement_timeout,
    )


def client() -> JobClient:
    return JobClient(storage(), clock(), get_settings())


def install() -> None:
    """Make ``fn.enqueue()`` use the configured storage, and hard-timeout jobs' child
    processes set Django up; a configuration the system checks reject installs no
    client (``manage.py check`` says why)."""
    set_child_setup(django_child)
    try:
        set_default_client(client())
    except (InvalidSettings, ImproperlyConfigured, InvalidProvider):
        set_default_client(None)


@receiver(setting_changed)
def _reinstall(*, setting: str, **kwargs: object) -> None:
    if setting in ("MILLRACE", "DATABASES"):
        clock.cache_clear()
        clock_sync.cache_clear()
        storage.cache_clear()
        install()
