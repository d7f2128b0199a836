"""Millrace for Django: durable background jobs and workflows as a Django app.

    from millrace_django import job, jobs, tenant, Retry, JobContext, workflows

The names load lazily, so importing ``millrace_django.contract`` (say, to write a
provider) pulls in nothing else.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from millrace_django import jobs, workflows
    from millrace_django.contract import JobState
    from millrace_django.engine.job_context import JobContext
    from millrace_django.engine.registry import job
    from millrace_django.engine.retry import Retry
    from millrace_django.engine.status import JobStatus
    from millrace_django.engine.tenancy import current_tenant, tenant
    from millrace_django.workflows import signal

_EXPORTS = {
    "job": ("millrace_django.engine.registry", "job"),
    "Retry": ("millrace_django.engine.retry", "Retry"),
    "JobContext": ("millrace_django.engine.job_context", "JobContext"),
    "JobState": ("millrace_django.contract", "JobState"),
    "JobStatus": ("millrace_django.engine.status", "JobStatus"),
    "tenant": ("millrace_django.engine.tenancy", "tenant"),
    "current_tenant": ("millrace_django.engine.tenancy", "current_tenant"),
    "signal": ("millrace_django.workflows", "signal"),
}


def __getattr__(name: str) -> Any:
    if name in ("jobs", "workflows"):
        return import_module(f"millrace_django.{name}")
    if name in _EXPORTS:
        module, attribute = _EXPORTS[name]
        return getattr(import_module(module), attribute)
    raise AttributeError(f"module 'millrace_django' has no attribute {name!r}")


__all__ = [
    "JobContext",
    "JobState",
    "JobStatus",
    "Retry",
    "current_tenant",
    "job",
    "jobs",
    "signal",
    "tenant",
    "workflows",
]
