"""The executable conformance kit: what "supported" means for a storage.

Bind a provider in a few lines (see ``docs/writing-a-storage-provider.md``)::

    class TestMyJobs(MyBinding, JobStorageFacts): ...

A binding whose store runs one writer at a time sets ``contention =
SINGLE_WRITER_CONTENTION`` on its fact groups: fewer racers prove the same there.

The suites load lazily, so importing a helper module does not import every fact.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from millrace_django.conformance.contention import (
    FULL_CONTENTION,
    SINGLE_WRITER_CONTENTION,
    Contention,
)
from millrace_django.conformance.harness import StorageHarness, StoreUnderTest

if TYPE_CHECKING:
    from millrace_django.conformance.jobs import JobStorageFacts
    from millrace_django.conformance.monitoring import MonitoringFacts
    from millrace_django.conformance.workflows import WorkflowStorageFacts

_SUITES = {
    "JobStorageFacts": "millrace_django.conformance.jobs",
    "WorkflowStorageFacts": "millrace_django.conformance.workflows",
    "MonitoringFacts": "millrace_django.conformance.monitoring",
}


def __getattr__(name: str) -> Any:
    if name in _SUITES:
        return getattr(import_module(_SUITES[name]), name)
    if name == "SUITES":
        return tuple(__getattr__(suite) for suite in _SUITES)
    raise AttributeError(name)


__all__ = [
    "FULL_CONTENTION",
    "SINGLE_WRITER_CONTENTION",
    "Contention",
    "JobStorageFacts",
    "MonitoringFacts",
    "StorageHarness",
    "StoreUnderTest",
    "WorkflowStorageFacts",
]
