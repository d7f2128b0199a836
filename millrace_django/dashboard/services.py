"""What the dashboard reads and acts through: the storage's monitoring read model, the
job client and the workflow client, all built from the project's settings.

The dashboard never touches rows itself: reads go to
:class:`~millrace_django.contract.MonitoringStorage`, actions to the engine's clients.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from millrace_django import assembly
from millrace_django.conf import get_settings
from millrace_django.contract import (
    JSON,
    LimitUsage,
    MonitoringStorage,
    Storage,
    WorkerHeartbeat,
    WorkflowInstanceRecord,
)
from millrace_django.engine.client import JobClient
from millrace_django.engine.workflow import Position, WorkflowClient, WorkflowInstance, find
from millrace_django.engine.workflow.graph import read_path
from millrace_django.engine.workflow.instance_cursor import cursor_of
from millrace_django.errors import MillraceError


def monitoring() -> MonitoringStorage:
    """The configured storage's read model (the system checks refuse a storage without
    one, so this only fails on a misconfigured project)."""
    storage = assembly.storage()
    if not isinstance(storage, MonitoringStorage):  # pragma: no cover - see checks.py
        raise TypeError(f"{type(storage).__name__} has no monitoring read model")
    return storage


def storage_provider() -> str:
    storage = assembly.storage()
    return f"{type(storage).__module__}.{type(storage).__qualname__}"


def jobs() -> JobClient:
    return assembly.client()


def workflows() -> WorkflowClient:
    return WorkflowClient(assembly.storage(), assembly.clock(), get_settings())


def now() -> datetime:
    return assembly.clock().now()


def configured_queues() -> list[str]:
    return sorted(get_settings().queues)


# -- workers and throughput ------------------------------------------------------------

GONE_AFTER_HEARTBEATS = 3
"""A registered worker not seen for this many heartbeat intervals is shown as gone."""
THROUGHPUT_MINUTES = 60
"""Minutes the overview's throughput chart covers (the current one included)."""


def job_storage() -> Storage:
    """The configured storage, whole (job, workflow and monitoring operations)."""
    return assembly.storage()


@dataclass(frozen=True, slots=True)
class RegisteredWorker:
    """A registry row as the workers page shows it."""

    heartbeat: WorkerHeartbeat
    gone: bool
    """Not seen for :data:`GONE_AFTER_HEARTBEATS` heartbeats: probably stopped or
    partitioned. Its jobs (if any) come back by their leases, not by this flag."""

    @property
    def worker_id(self) -> str:
        return self.heartbeat.worker_id

    @property
    def queues(self) -> list[str]:
        return sorted(self.heartbeat.queues)


def gone_before() -> datetime:
    """Workers last seen before this instant are shown as gone."""
    return now() - GONE_AFTER_HEARTBEATS * get_settings().heartbeat


def worker_registry() -> list[RegisteredWorker] | None:
    """Registered workers with their heartbeats, most recently seen first (``None`` when
    the storage has no registry)."""
    list_workers = getattr(assembly.storage(), "list_workers", None)
    if list_workers is None:
        return None
    cutoff = gone_before()
    return [RegisteredWorker(beat, beat.seen_at < cutoff) for beat in list_workers()]


@dataclass(frozen=True, slots=True)
class WorkerCensus:
    """The registry at a glance: the workers alive, and how many are gone."""

    alive: list[RegisteredWorker]
    gone: int

    @property
    def in_flight(self) -> int:
        """Jobs the alive workers held at their last heartbeats."""
        return sum(worker.heartbeat.in_flight for worker in self.alive)

    @property
    def capacity(self) -> int:
        return sum(worker.heartbeat.concurrency for worker in self.alive)


def worker_census() -> WorkerCensus | None:
    """The overview's workers, from the registry (``None`` when the storage has none)."""
    registry = worker_registry()
    if registry is None:
        return None
    alive = [worker for worker in registry if not worker.gone]
    return WorkerCensus(alive=alive, gone=len(registry) - len(alive))


def limit_usage() -> list[LimitUsage]:
    """Per queue and job function whose jobs carry a limit: the limit and its use now."""
    return monitoring().get_limit_usage()


def paused_queues() -> frozenset[str] | None:
    """Queues an operator paused (``None`` when the storage cannot pause queues)."""
    read = getattr(assembly.storage(), "paused_queues", None)
    return frozenset(read()) if read is not None else None


@dataclass(frozen=True, slots=True)
class ThroughputPoint:
    """Jobs that finished in one time bucket."""

    start: datetime
    succeeded: int
    failed: int


def throughput() -> Sequence[ThroughputPoint] | None:
    """Succeeded and dead jobs per minute over the last :data:`THROUGHPUT_MINUTES`
    minutes, the current one included, for the overview chart (all tenants: the
    storage's counts are not per tenant). ``None`` when the storage has no such read."""
    read = getattr(assembly.storage(), "get_throughput", None)
    if read is None:
        return None
    until = now().replace(second=0, microsecond=0) + timedelta(minutes=1)
    points = read(until - timedelta(minutes=THROUGHPUT_MINUTES), until)
    return [ThroughputPoint(p.minute, p.succeeded, p.failed) for p in points]


# -- workflows -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class InstanceView:
    """Everything the instance page shows: the record, the owner's view (errors and
    failures awaiting an operator), the live position and the definition's graph."""

    record: WorkflowInstanceRecord
    view: WorkflowInstance
    position: Position | None
    graph: dict[str, JSON] | None
    graph_problem: str | None
    pending_jobs: list[tuple[UUID, str, str]]
    """``(job id, kind, node)`` of each job the instance is waiting on."""
    waits: list[dict[str, Any]]


def _signal_of(graph: dict[str, JSON] | None, data: JSON, waiting_at: str) -> dict[str, str]:
    """The signal name the wait at the node ``waiting_at`` expects and, when its
    correlation is a key path into the data, the correlation id (to prefill the signals
    form)."""
    nodes = graph.get("nodes") if graph is not None else None
    found: dict[str, str] = {}
    for node in nodes if isinstance(nodes, list) else []:
        if not isinstance(node, dict) or node.get("id") != waiting_at:
            continue
        if isinstance(node.get("signal"), str):
            found["signal"] = str(node["signal"])
        path = node.get("correlation")
        if isinstance(path, str) and isinstance(data, dict):
            try:
                value = read_path(data, path)
            except (MillraceError, KeyError, TypeError, ValueError):
                value = None
            if isinstance(value, str | int):
                found["correlation_id"] = str(value)
    return found


def instance_view(instance_id: UUID) -> InstanceView | None:
    client = workflows()
    record = client.storage.get_instance(instance_id)
    view = client.get(instance_id)
    if record is None or view is None:
        return None
    cursor = cursor_of(record)
    position: Position | None
    try:
        position = client.position(instance_id)
    except (LookupError, MillraceError, KeyError, TypeError):
        position = None
    graph: dict[str, JSON] | None = None
    problem: str | None = None
    try:
        definition = find(
            record.definition_id,
            record.definition_version,
            cursor.module if cursor is not None else None,
        )
        graph = definition.export_graph()
    except (LookupError, MillraceError, ImportError) as error:
        problem = f"The definition is not loaded in this process: {error}"
    pending = [
        (UUID(job_id), entry.kind.value, entry.node)
        for job_id, entry in sorted(cursor.jobs.items() if cursor is not None else ())
    ]
    waits = [
        {"bookmark": bookmark_id, **wait.to_json(), **_signal_of(graph, record.data, wait.node)}
        for bookmark_id, wait in sorted(cursor.waits.items() if cursor is not None else ())
    ]
    return InstanceView(
        record=record,
        view=view,
        position=position,
        graph=graph,
        graph_problem=problem,
        pending_jobs=pending,
        waits=waits,
    )
