"""Millrace for Django: durable background jobs and workflows as a Django app.

    from millrace_django import job, jobs, tenant, Retry

The names load lazily, so importing ``millrace_django.contract`` (say, to write a
provider) pulls in nothing else.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from millrace_django import jobs
    from millrace_django.engine.context import JobContext
    from millrace_django.engine.registry import job
    from millrace_django.engine.retry import Retry
    from millrace_django.engine.tenancy import current_tenant, tenant

_EXPORTS = {
    "job": ("millrace_django.engine.registry", "job"),
    "Retry": ("millrace_django.engine.retry", "Retry"),
    "JobContext": ("millrace_django.engine.context", "JobContext"),
    "tenant": ("millrace_django.engine.tenancy", "tenant"),
    "current_tenant": ("millrace_django.engine.tenancy", "current_tenant"),
}


def __getattr__(name: str) -> Any:
    if name == "jobs":
        return import_module("millrace_django.jobs")
    if name in _EXPORTS:
        module, attribute = _EXPORTS[name]
        return getattr(import_module(module), attribute)
    raise AttributeError(f"module 'millrace_django' has no attribute {name!r}")


__all__ = ["JobContext", "Retry", "current_tenant", "job", "jobs", "tenant"]
