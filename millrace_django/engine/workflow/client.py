"""The workflow client: start instances, signal them, read them, cancel and recover.

Every write is one storage atom: a start stores the instance with its first jobs and
waits; a signal consumes the oldest matching bookmark and inserts the resume job;
a cancel is :meth:`~millrace_django.contract.WorkflowStorage.cancel_instance`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, overload
from uuid import UUID

from millrace_django.clock import Clock
from millrace_django.contract import (
    JSON,
    TERMINAL_INSTANCE_STATES,
    InstanceQuery,
    InstanceState,
    InstanceSummary,
    JobRecord,
    JobStorage,
    MonitoringStorage,
    NewInstance,
    Page,
    WorkflowInstanceRecord,
)
from millrace_django.engine.engine_settings import EngineConfig
from millrace_django.engine.errors import UnknownQueue
from millrace_django.engine.tenancy import current_tenant
from millrace_django.engine.workflow import targets
from millrace_django.engine.workflow.definition import Workflow, find
from millrace_django.engine.workflow.documents import (
    from_document,
    to_document,
)
from millrace_django.engine.workflow.graph import Kind
from millrace_django.engine.workflow.instance_cursor import Cursor, JobKind, cursor_of
from millrace_django.engine.workflow.plan import Plan, instance_job
from millrace_django.engine.workflow.signals import Signal, deliver
from millrace_django.engine.workflow.spec import Recovery, Step
from millrace_django.engine.workflow.store import WorkflowStore, workflow_store
from millrace_django.ids import new_id
from millrace_django.observability.telemetry import carry_trace, publish


@dataclass(frozen=True, slots=True, kw_only=True)
class Stuck:
    """A failure waiting for an operator (see :meth:`WorkflowClient.recover`)."""

    job_id: UUID
    kind: str
    """``"step"`` (its policy is suspend) or ``"compensation"``."""
    node: str
    error: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkflowInstance:
    """An instance as its owner sees it."""

    id: UUID
    definition_id: str
    version: int
    state: InstanceState
    data: dict[str, JSON]
    created_at: datetime
    updated_at: datetime
    revision: int
    tenant_id: str | None
    error: str | None = None
    """The last failure's error, if a step failed."""
    failed_node: str | None = None
    stuck: tuple[Stuck, ...] = ()

    @property
    def finished(self) -> bool:
        return self.state in TERMINAL_INSTANCE_STATES


_ENDED_BY_A_FAILURE = frozenset({InstanceState.FAILED, InstanceState.COMPENSATED})
"""Finished states whose checkpoint names the step that failed (a compensated instance
unwound its saga because of it)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Position:
    """Where an instance is: nodes finished (at least once), running (a job holds
    them), waiting (for a signal or a timer), compensating, and failed (awaiting an
    operator, or the step whose failure ended a failed or compensated instance)."""

    state: InstanceState
    done: tuple[str, ...] = ()
    running: tuple[str, ...] = ()
    waiting: tuple[str, ...] = ()
    compensating: tuple[str, ...] = ()
    failed: tuple[str, ...] = ()
    extra: dict[str, JSON] = field(default_factory=dict)

    def to_json(self) -> dict[str, JSON]:
        return {
            "state": self.state.value,
            "done": list(self.done),
            "running": list(self.running),
            "waiting": list(self.waiting),
            "compensating": list(self.compensating),
            "failed": list(self.failed),
        }


class WorkflowClient:
    """Workflows over one storage (jobs and instances together)."""

    def __init__(self, storage: JobStorage, clock: Clock, config: EngineConfig) -> None:
        self.storage: WorkflowStore = workflow_store(storage)
        self.clock = clock
        self.config = config

    # -- starting ---------------------------------------------------------------------

    def start(
        self,
        workflow: Workflow | str,
        data: object = None,
        *,
        version: int | None = None,
        instance_id: UUID | None = None,
    ) -> UUID:
        """Start an instance of ``workflow`` (a definition, or an id: its latest
        version unless ``version`` pins one) on ``data`` (a dict or a dataclass).

        The instance, its first jobs and its first waits are stored in one atom, in the
        ambient tenant. Routing steps at the start (if, parallel, for-each, saga) are
        resolved now, so a bad condition or correlation raises here and stores nothing.
        A duplicate ``instance_id`` raises
        :class:`~millrace_django.errors.ConcurrencyConflict`.
        """
        definition = self._definition(workflow, version)
        start = self._planned(definition, data, instance_id)
        self.storage.create_instance(
            start.instance, enqueue=start.enqueue, bookmarks=start.bookmarks
        )
        return start.instance.id

    def start_many(
        self, workflow: Workflow | str, items: Iterable[object], *, version: int | None = None
    ) -> list[UUID]:
        """Start one instance of ``workflow`` per item of ``items`` (each a dict or a
        dataclass), all in one atom: every instance with its first jobs and waits, or,
        if one of them cannot start, none (its error is raised). The ids, in order.

        Much cheaper per instance than :meth:`start` in a loop: one transaction, and a
        few statements in all rather than a few per instance.
        """
        definition = self._definition(workflow, version)
        starts = [self._planned(definition, data, None) for data in items]
        self.storage.create_instances(starts)
        return [start.instance.id for start in starts]

    def _planned(self, definition: Workflow, data: object, instance_id: UUID | None) -> NewInstance:
        """A new instance of ``definition`` with its first jobs and waits (the routing
        at the start resolved: a bad condition or correlation raises here)."""
        document = to_document(data)
        queue = definition.queue or self.config.default_queue
        queues = self._check_queues(definition, queue)
        now = self.clock.now()
        instance = WorkflowInstanceRecord(  # its cursor is the plan's to write
            id=instance_id if instance_id is not None else new_id(self.clock),
            definition_id=definition.id,
            definition_version=definition.version,
            state=InstanceState.RUNNING,
            data=document,
            created_at=now,
            updated_at=now,
            tenant_id=current_tenant(),
        )
        cursor = Cursor(
            module=definition.module,
            queue=queue,
            retry=definition.retry or self.config.default_retry,
            limits={q: (limit,) for q, limit in self.config.queue_limits.items() if q in queues},
        )
        plan = Plan(definition, instance, cursor, document, self.clock)
        plan.start()
        return NewInstance(
            instance=plan.finish(),
            enqueue=tuple(carry_trace(plan.jobs)),
            bookmarks=tuple(plan.bookmarks),
        )

    # -- signals ----------------------------------------------------------------------

    def signal(self, name: str, correlation_id: str, payload: object = None) -> bool:
        """Resume the instance that has waited longest for ``name`` with
        ``correlation_id``: its bookmark is consumed and its resume job stored in one
        atom. Returns whether an instance was waiting.

        The payload (a dataclass or JSON) must fit what the waiting step declared, or
        :class:`~millrace_django.engine.workflow.errors.InvalidSignalPayload` is raised
        and the instance keeps waiting. Whichever of a signal and its wait's timeout
        comes first wins; the other finds nothing.
        """
        (resumed,) = deliver(self.storage, self.clock, [Signal(name, correlation_id, payload)])
        return resumed

    def signal_many(self, signals: Iterable[Signal]) -> list[bool]:
        """:meth:`signal` for many signals at once, in one atom: per signal, whether an
        instance was waiting (a signal finds the oldest wait not taken by an earlier one
        in the list). One payload that does not fit its wait raises and delivers none.
        """
        return deliver(self.storage, self.clock, list(signals))

    # -- operators --------------------------------------------------------------------

    def cancel(self, instance_id: UUID) -> bool:
        """Cancel the instance: its pending jobs are cancelled (running ones asked to
        stop), its waits removed, its state ``cancelled``, in one atom. ``False`` if it
        is unknown or already finished."""
        return self.storage.cancel_instance(instance_id)

    def recover(
        self, instance_id: UUID, action: Recovery | str, *, job_id: UUID | None = None
    ) -> bool:
        """Answer a suspended instance's failure (the oldest, or the one left by
        ``job_id``): ``retry`` it with a fresh retry budget, ``skip`` it, or ``abandon``
        the instance (failed). Carried by a job that re-checks; ``False`` if the
        instance is not suspended on such a failure."""
        choice = Recovery(action)
        instance = self.storage.get_instance(instance_id)
        if instance is None or instance.state is not InstanceState.SUSPENDED:
            return False
        cursor = cursor_of(instance)
        stuck = _stuck_of(cursor)
        if job_id is not None:
            stuck = tuple(s for s in stuck if s.job_id == job_id)
        if cursor is None or not stuck:
            return False
        job = instance_job(
            instance,
            cursor,
            new_id(self.clock),
            targets.RECOVER,
            (str(instance.id), choice.value, str(stuck[0].job_id)),
            node=stuck[0].node,
            now=self.clock.now(),
        )
        publish(self.storage, [job])
        return True

    # -- reading ----------------------------------------------------------------------

    def get(self, instance_id: UUID) -> WorkflowInstance | None:
        record = self.storage.get_instance(instance_id)
        return _view(record) if record is not None else None

    @overload
    def data(self, instance_id: UUID) -> dict[str, JSON]: ...

    @overload
    def data[T](self, instance_id: UUID, as_: type[T]) -> T: ...

    def data(self, instance_id: UUID, as_: type[Any] | None = None) -> Any:
        """The instance's data (a dict, or the dataclass ``as_``); ``LookupError`` if
        there is no such instance."""
        record = self.storage.get_instance(instance_id)
        if record is None:
            raise LookupError(f"no workflow instance {instance_id}")
        data = record.data if isinstance(record.data, dict) else {}
        return from_document(data, as_) if as_ is not None else data

    def list(
        self,
        *,
        states: Iterable[InstanceState] = (),
        definition: Workflow | str | None = None,
        version: int | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> Page[InstanceSummary]:
        """Instances, newest first, a keyset page at a time (pass back ``next_cursor``)."""
        if not isinstance(self.storage, MonitoringStorage):
            raise TypeError(f"{type(self.storage).__name__} cannot list instances")
        definition_id = definition.id if isinstance(definition, Workflow) else definition
        return self.storage.query_instances(
            InstanceQuery(
                states=frozenset(states),
                definition_id=definition_id,
                definition_version=version,
                cursor=cursor,
                limit=limit,
            )
        )

    def graph(self, workflow: Workflow | str, version: int | None = None) -> dict[str, JSON]:
        """A definition's graph (nodes, edges, kinds) as JSON, for the dashboard."""
        return self._definition(workflow, version).export_graph()

    def position(self, instance_id: UUID) -> Position:
        """Which nodes of the instance are done, running and waiting now."""
        record = self.storage.get_instance(instance_id)
        if record is None:
            raise LookupError(f"no workflow instance {instance_id}")
        cursor = cursor_of(record)
        if cursor is None:
            return Position(state=record.state)
        live = record.state not in TERMINAL_INSTANCE_STATES
        running: list[str] = []
        waiting: list[str] = []
        compensating: list[str] = []
        for entry in cursor.jobs.values() if live else ():
            if entry.kind is JobKind.STEP:
                running.append(entry.node)
            elif entry.kind is JobKind.COMPENSATE:
                compensating.append(entry.node)
            elif entry.kind is JobKind.DELAY:
                waiting.append(entry.node)
        waiting += [wait.node for wait in cursor.waits.values()] if live else []
        failed = [stuck.node for stuck in cursor.stuck.values()] if live else []
        ended_by = cursor.error.node if cursor.error is not None else None
        if ended_by is not None and record.state in _ENDED_BY_A_FAILURE:
            failed.append(ended_by)
        return Position(
            state=record.state,
            done=cursor.done,
            running=_unique(running),
            waiting=_unique(waiting),
            compensating=_unique(compensating),
            failed=_unique(failed),
        )

    # -- inside -----------------------------------------------------------------------

    def _definition(self, workflow: Workflow | str, version: int | None) -> Workflow:
        if isinstance(workflow, Workflow):
            if version is not None and version != workflow.version:
                return find(workflow.id, version, workflow.module)
            return workflow
        return find(workflow, version)

    def _check_queues(self, definition: Workflow, queue: str) -> set[str]:
        """The queues the instance's jobs go to; an unknown one raises."""
        known = frozenset(self.config.queues)
        queues = {queue}
        for node in definition.graph.nodes.values():
            if node.kind is Kind.ACTIVITY and isinstance(node.spec, Step) and node.spec.queue:
                queues.add(node.spec.queue)
        for name in sorted(queues - known):
            raise UnknownQueue(name, known)
        return queues


def _with_args(job: JobRecord, args: tuple[JSON, ...]) -> JobRecord:
    from dataclasses import replace

    return replace(job, invocation=replace(job.invocation, args=args))


def _stuck_of(cursor: Cursor | None) -> tuple[Stuck, ...]:
    """The failures awaiting an operator, oldest first."""
    if cursor is None:
        return ()
    return tuple(
        Stuck(job_id=UUID(job_id), kind=s.kind.value, node=s.node, error=s.error)
        for job_id, s in sorted(cursor.stuck.items(), key=lambda item: item[1].at)
    )


def _view(record: WorkflowInstanceRecord) -> WorkflowInstance:
    cursor = cursor_of(record)
    error = cursor.error if cursor is not None else None
    return WorkflowInstance(
        id=record.id,
        definition_id=record.definition_id,
        version=record.definition_version,
        state=record.state,
        data=record.data if isinstance(record.data, dict) else {},
        created_at=record.created_at,
        updated_at=record.updated_at,
        revision=record.revision,
        tenant_id=record.tenant_id,
        error=error.error if error is not None else None,
        failed_node=error.node if error is not None else None,
        stuck=_stuck_of(cursor),
    )


def _unique(items: list[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(items))
