"""Storage providers. Each implements the contract and imports nothing above it.

This is the one place that picks a provider by name.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from importlib import import_module
from typing import Any

from millrace_django.clock import Clock
from millrace_django.contract import JobStorage, MonitoringStorage, Storage, WorkflowStorage

PROVIDERS = ("orm", "memory")
"""The providers shipped here; any other name is the dotted path of a provider factory."""


class InvalidProvider(ValueError):
    """A provider factory that cannot be called, fails, or makes an incomplete provider."""


def open_storage(name: str, *, alias: str, clock: Clock, statement_timeout: timedelta) -> Storage:
    """The provider called ``name``: ``"orm"`` on database ``alias``, each statement
    bounded by ``statement_timeout``; ``"memory"``; or what the factory at dotted path
    ``name`` makes, called as ``factory(clock, alias=alias,
    statement_timeout=statement_timeout)`` (raises :class:`InvalidProvider`)."""
    if name == "orm":
        from millrace_django.storage.orm import DjangoStorage

        return DjangoStorage(alias, clock, statement_timeout=statement_timeout)
    if name == "memory":
        from millrace_django.storage.memory import MemoryStorage

        return MemoryStorage(clock)
    if "." in name:
        return _made_by(name, clock, alias=alias, statement_timeout=statement_timeout)
    raise ValueError(
        f"unknown storage {name!r}; choose one of {', '.join(PROVIDERS)}, or the dotted path "
        "of a provider factory"
    )


def missing_operations(candidate: object) -> list[str]:
    """The contract's operations ``candidate`` lacks, sorted (none: a complete provider,
    :class:`~millrace_django.contract.Storage`). A check of names, not of behaviour:
    the conformance kit checks that."""
    protocols = (JobStorage, WorkflowStorage, MonitoringStorage)
    names = {name for p in protocols for name in vars(p) if not name.startswith("_")}
    return sorted(name for name in names if not hasattr(candidate, name))


def _made_by(path: str, clock: Clock, **options: Any) -> Storage:
    module_name, _, attribute = path.rpartition(".")
    try:
        factory: Callable[..., object] = getattr(import_module(module_name), attribute)
    except (ImportError, AttributeError) as error:
        raise InvalidProvider(
            f"the provider factory {path!r} cannot be imported: {error}"
        ) from error
    try:
        made = factory(clock, **options)
    except Exception as error:
        raise InvalidProvider(
            f"the provider factory {path!r} failed when called as factory(clock, "
            f"alias=..., statement_timeout=...): {type(error).__name__}: {error}"
        ) from error
    missing = missing_operations(made)
    if missing or not isinstance(made, Storage):
        raise InvalidProvider(
            f"the provider factory {path!r} made {type(made).__qualname__}, which is not a "
            f"complete storage provider: it lacks {', '.join(missing)}"
        )
    return made
