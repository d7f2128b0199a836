"""The storage a workflow needs: jobs and workflow instances over the same data."""

from __future__ import annotations

from typing import Protocol, cast, runtime_checkable

from millrace_django.contract import JobStorage, WorkflowStorage


@runtime_checkable
class WorkflowStore(JobStorage, WorkflowStorage, Protocol):
    """A provider's job and workflow halves (the memory and ORM providers are both)."""


def workflow_store(storage: JobStorage) -> WorkflowStore:
    """``storage`` if it also stores workflows; else a ``TypeError`` saying so."""
    if not isinstance(storage, WorkflowStorage):
        raise TypeError(f"{type(storage).__name__} does not store workflow instances")
    return cast(WorkflowStore, storage)
