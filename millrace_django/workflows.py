"""Durable workflows through the configured storage: ``from millrace_django import workflows``.

Define a workflow once, at import, from the builder vocabulary re-exported here::

    from millrace_django.workflows import Workflow, Step, WaitForSignal, If, Parallel

    ORDER = Workflow("order-approval", version=1, steps=[...])

then start, signal, read, cancel and recover instances with the functions below (thin
wrappers over :class:`~millrace_django.engine.workflow.WorkflowClient` on the default
client's storage). See ``docs/workflows.md``.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any
from uuid import UUID

from millrace_django.contract import JSON, InstanceState, InstanceSummary, Page
from millrace_django.engine.default_client import default_client
from millrace_django.engine.workflow import (
    ActivityContext,
    Delay,
    ForEach,
    If,
    InvalidSignalPayload,
    InvalidWorkflow,
    InvalidWorkflowData,
    Nested,
    OnFailure,
    Parallel,
    Position,
    Recovery,
    Saga,
    Signal,
    Step,
    Stuck,
    UnknownWorkflow,
    WaitForSignal,
    Workflow,
    WorkflowClient,
    WorkflowInstance,
    WorkflowStepError,
)


def client() -> WorkflowClient:
    """A workflow client on the default job client's storage, clock and settings."""
    jobs = default_client()
    return WorkflowClient(jobs.storage, jobs.clock, jobs.config)


def start(
    workflow: Workflow | str,
    data: object = None,
    *,
    version: int | None = None,
    instance_id: UUID | None = None,
) -> UUID:
    """Start an instance (the latest version of an id, unless ``version`` pins one);
    stored with its first jobs and waits in one atom. Returns its id."""
    return client().start(workflow, data, version=version, instance_id=instance_id)


def start_many(
    workflow: Workflow | str, items: Iterable[object], *, version: int | None = None
) -> list[UUID]:
    """Start one instance per item, all in one atom (every one or none); their ids."""
    return client().start_many(workflow, items, version=version)


def signal(name: str, correlation_id: str, payload: object = None) -> bool:
    """Resume the instance waiting longest for ``name``/``correlation_id`` with
    ``payload``; whether one was waiting. A payload that does not fit raises
    :class:`InvalidSignalPayload` and the instance keeps waiting."""
    return client().signal(name, correlation_id, payload)


def signal_many(signals: Iterable[Signal]) -> list[bool]:
    """Deliver many signals in one atom: per signal, whether an instance was waiting.
    One payload that does not fit raises :class:`InvalidSignalPayload` and delivers
    none."""
    return client().signal_many(signals)


def cancel(instance_id: UUID) -> bool:
    """Cancel an instance, its pending jobs and its waits, in one atom."""
    return client().cancel(instance_id)


def recover(instance_id: UUID, action: Recovery | str, *, job_id: UUID | None = None) -> bool:
    """Answer a suspended instance's failure: ``"retry"``, ``"skip"`` or ``"abandon"``."""
    return client().recover(instance_id, action, job_id=job_id)


def get(instance_id: UUID) -> WorkflowInstance | None:
    """The instance (state, data, error), or ``None``."""
    return client().get(instance_id)


def data(instance_id: UUID, as_: type[Any] | None = None) -> Any:
    """The instance's data: a dict, or the dataclass ``as_``."""
    if as_ is None:
        return client().data(instance_id)
    return client().data(instance_id, as_)


def instances(
    *,
    states: Iterable[InstanceState] = (),
    definition: Workflow | str | None = None,
    version: int | None = None,
    limit: int = 50,
    cursor: str | None = None,
) -> Page[InstanceSummary]:
    """Instances, newest first, one keyset page at a time."""
    return client().list(
        states=states, definition=definition, version=version, limit=limit, cursor=cursor
    )


def graph(workflow: Workflow | str, version: int | None = None) -> dict[str, JSON]:
    """A definition's graph (nodes, edges, kinds), as JSON."""
    return client().graph(workflow, version)


def position(instance_id: UUID) -> Position:
    """Which nodes of an instance are done, running and waiting."""
    return client().position(instance_id)


__all__ = [
    "ActivityContext",
    "Delay",
    "ForEach",
    "If",
    "InstanceState",
    "InvalidSignalPayload",
    "InvalidWorkflow",
    "InvalidWorkflowData",
    "Nested",
    "OnFailure",
    "Parallel",
    "Position",
    "Recovery",
    "Saga",
    "Signal",
    "Step",
    "Stuck",
    "UnknownWorkflow",
    "WaitForSignal",
    "Workflow",
    "WorkflowClient",
    "WorkflowInstance",
    "WorkflowStepError",
    "cancel",
    "client",
    "data",
    "get",
    "graph",
    "instances",
    "position",
    "recover",
    "signal",
    "signal_many",
    "start",
    "start_many",
]
