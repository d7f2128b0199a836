"""Storage providers. Each implements the contract and imports nothing above it.

This is the one place that picks a provider by name.
"""

from __future__ import annotations

from datetime import timedelta

from millrace_django.clock import Clock
from millrace_django.contract import Storage

PROVIDERS = ("orm", "memory")


def open_storage(name: str, *, alias: str, clock: Clock, statement_timeout: timedelta) -> Storage:
    """The provider called ``name``: ``"orm"`` on database ``alias``, each statement
    bounded by ``statement_timeout``; or ``"memory"``."""
    if name == "orm":
        from millrace_django.storage.orm import DjangoStorage

        return DjangoStorage(alias, clock, statement_timeout=statement_timeout)
    if name == "memory":
        from millrace_django.storage.memory import MemoryStorage

        return MemoryStorage(clock)
    raise ValueError(f"unknown storage {name!r}; choose one of {', '.join(PROVIDERS)}")
