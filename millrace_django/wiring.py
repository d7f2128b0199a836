"""Builds the configured storage and job client, and installs the client as the default.

The engine's decorators run at import time, long before settings are read; the app
config calls :func:`install` once Django is ready, and again whenever a test overrides
``MILLRACE`` or ``DATABASES``.
"""

from __future__ import annotations

from functools import cache

from django.core.exceptions import ImproperlyConfigured
from django.core.signals import setting_changed
from django.dispatch import receiver

from millrace_django.clock import Clock, SystemClock
from millrace_django.conf import InvalidSettings, get_settings
from millrace_django.contract import Storage
from millrace_django.engine.client import JobClient
from millrace_django.engine.current import set_default_client
from millrace_django.storage import open_storage

_SYSTEM_CLOCK = SystemClock()


def clock() -> Clock:
    return _SYSTEM_CLOCK


@cache
def storage() -> Storage:
    """The storage ``MILLRACE`` configures (one per process)."""
    settings = get_settings()
    return open_storage(settings.storage, alias=settings.database, clock=clock())


def client() -> JobClient:
    return JobClient(storage(), clock(), get_settings())


def install() -> None:
    """Make ``fn.enqueue()`` use the configured storage; a configuration the system
    checks reject installs nothing (``manage.py check`` says why)."""
    try:
        set_default_client(client())
    except (InvalidSettings, ImproperlyConfigured):
        set_default_client(None)


@receiver(setting_changed)
def _reinstall(*, setting: str, **kwargs: object) -> None:
    if setting in ("MILLRACE", "DATABASES"):
        storage.cache_clear()
        install()
