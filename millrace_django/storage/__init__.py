"""Storage providers. Each implements the contract and imports nothing above it.

This is the one place that picks a provider by name.
"""

from __future__ import annotations

from millrace_django.clock import Clock
from millrace_django.contract import Storage

PROVIDERS = ("orm", "memory")


def open_storage(name: str, *, alias: str, clock: Clock) -> Storage:
    """The provider called ``name``: ``"orm"`` on database ``alias``, or ``"memory"``."""
    if name == "orm":
        from millrace_django.storage.orm import DjangoStorage

        return DjangoStorage(alias, clock)
    if name == "memory":
        from millrace_django.storage.memory import MemoryStorage

        return MemoryStorage(clock)
    raise ValueError(f"unknown storage {name!r}; choose one of {', '.join(PROVIDERS)}")
