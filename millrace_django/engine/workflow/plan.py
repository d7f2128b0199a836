"""Routing: from one event on an instance to its next checkpoint, jobs and bookmarks.

A :class:`Plan` works on an instance's cursor (:mod:`.instance_cursor`) and a copy of
its data and records what the event leads to: the instance record to checkpoint (state,
data, cursor), the jobs to insert and the bookmarks to add. It touches no storage; the
dispatcher hands the result to the worker, which commits it with the job's own success
(or, at start, with the new instance). Routing nodes (if, parallel, for-each, saga) are
resolved here, in the same step, without spending a job. A plan is a pure function of
(definition, instance, event), so a branch that lost the revision race simply plans
again on the stored instance (:mod:`~millrace_django.engine.workflow.merge`).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta
from uuid import UUID

from millrace_django.clock import Clock
from millrace_django.contract import (
    JSON,
    BookmarkRecord,
    InstanceState,
    Invocation,
    JobRecord,
    JobState,
    RetryKind,
    RetrySpec,
    WorkflowInstanceRecord,
)
from millrace_django.engine.workflow import targets
from millrace_django.engine.workflow.definition import Workflow
from millrace_django.engine.workflow.documents import type_name
from millrace_django.engine.workflow.errors import WorkflowStepError
from millrace_django.engine.workflow.graph import GraphNode, Kind, evaluate, write_path
from millrace_django.engine.workflow.instance_cursor import (
    Cursor,
    Frame,
    JobKind,
    JoinFrame,
    LastError,
    PendingJob,
    SagaFrame,
    SagaState,
    StuckJob,
    StuckKind,
    Wait,
)
from millrace_django.engine.workflow.spec import (
    Delay,
    ForEach,
    If,
    Nested,
    OnFailure,
    Recovery,
    Saga,
    Step,
    WaitForSignal,
)
from millrace_django.ids import new_id

_NO_RETRY = RetrySpec(kind=RetryKind.NONE, max_attempts=1)


class Plan:
    """One event's consequences for one instance (see the module docstring)."""

    def __init__(
        self,
        workflow: Workflow,
        instance: WorkflowInstanceRecord,
        cursor: Cursor,
        data: dict[str, JSON],
        clock: Clock,
    ) -> None:
        self.workflow = workflow
        self.graph = workflow.graph
        self.instance = instance
        self.cursor = cursor
        """The cursor as read; the event moves the working copies below (each a shallow
        copy: the records in them are frozen, a change replaces one)."""
        self.pending: dict[str, PendingJob] = dict(cursor.jobs)
        self.waits: dict[str, Wait] = dict(cursor.waits)
        self.frames: dict[str, Frame] = dict(cursor.frames)
        self.stuck: dict[str, StuckJob] = dict(cursor.stuck)
        self.done: list[str] = list(cursor.done)
        self.error: LastError | None = cursor.error
        self.seq = cursor.seq
        self.data = data
        self.clock = clock
        self.now: datetime = clock.now()
        self.jobs: list[JobRecord] = []
        self.bookmarks: list[BookmarkRecord] = []
        self.terminal: InstanceState | None = None
        self.ended = False

    # -- results ----------------------------------------------------------------------

    def finish(self) -> WorkflowInstanceRecord:
        """The instance record to checkpoint (its revision is the storage's business)."""
        if self.ended and self.terminal is None:
            self.terminal = InstanceState.COMPLETED
        if self.terminal is not None:
            state = self.terminal
            self.pending, self.waits, self.frames, self.stuck = {}, {}, {}, {}
        elif self.stuck or self._only_waiting():
            state = InstanceState.SUSPENDED
        else:
            state = InstanceState.RUNNING
        read = self.cursor
        cursor = Cursor(
            module=read.module,
            queue=read.queue,
            retry=read.retry,
            limits=read.limits,
            seq=self.seq,
            frames=self.frames,
            jobs=self.pending,
            waits=self.waits,
            stuck=self.stuck,
            done=tuple(self.done),
            error=self.error,
        )
        return replace(
            self.instance,
            state=state,
            data=self.data,
            cursor=cursor.to_json(),
            updated_at=self.now,
        )

    def _only_waiting(self) -> bool:
        """Waits, and no job but their timeouts: nothing moves until a signal."""
        return bool(self.waits) and all(
            entry.kind is JobKind.TIMEOUT for entry in self.pending.values()
        )

    # -- events -----------------------------------------------------------------------

    def start(self) -> None:
        self.enter(self.graph.start, None, None)

    def complete(self, job_id: UUID | str) -> bool:
        """The pending job ``job_id`` succeeded (step, compensation or timer); ``False``
        if the instance no longer expects it (nothing to checkpoint)."""
        entry = self.pending.pop(str(job_id), None)
        if entry is None:
            return False
        kind, node = entry.kind, self.graph.node(entry.node)
        scope, loop = entry.scope, entry.loop
        if kind is JobKind.COMPENSATE:
            if scope is not None and self._compensating(scope):
                self._next_compensation(scope)
            return True
        if kind is JobKind.TIMEOUT:
            return True
        self._done(node.id)
        if (
            kind is JobKind.STEP
            and isinstance(node.spec, Step)
            and node.spec.compensate is not None
        ):
            saga = self._nearest_saga(scope, alive_only=True)
            if saga is not None:
                frame = self._saga(saga)
                self.frames[saga] = replace(frame, completed=(*frame.completed, (node.id, loop)))
        if self._live(scope):
            self.enter(node.next, scope, loop)
        return True

    def resume(self, bookmark_id: str, payload: JSON, timed_out: bool) -> bool:
        """A signal (or its timeout) for the wait ``bookmark_id``; ``False`` if that
        wait is gone."""
        wait = self.waits.pop(bookmark_id, None)
        if wait is None:
            return False
        if wait.timeout is not None:
            self.pending.pop(wait.timeout, None)
        node = self.graph.node(wait.node)
        scope, loop = wait.scope, wait.loop
        if not self._live(scope):
            return True
        self._done(node.id)
        spec = node.spec
        assert isinstance(spec, WaitForSignal)
        if timed_out:
            self.enter(node.on_timeout, scope, loop)
            return True
        if spec.into is not None:
            write_path(self.data, spec.into, payload)
        elif spec.bind is not None:
            try:
                spec.bind(self.data, payload)
            except Exception as error:
                raise WorkflowStepError(
                    f"bind= of step {node.id!r} raised {type(error).__name__}: {error}"
                ) from error
        self.enter(node.next, scope, loop)
        return True

    def fail(self, job_id: UUID | str, error: str | None) -> bool:
        """The pending job ``job_id`` died (its retries spent)."""
        key = str(job_id)
        entry = self.pending.pop(key, None)
        if entry is None:
            return False
        kind, node = entry.kind, self.graph.node(entry.node)
        scope, loop = entry.scope, entry.loop
        if kind is JobKind.COMPENSATE:
            self._stick(key, StuckKind.COMPENSATION, node.id, scope, loop, error)
            return True
        if kind is not JobKind.STEP:
            self._fail_instance(node.id, error)
            return True
        if not self._live(scope):
            return True
        spec = node.spec
        assert isinstance(spec, Step)
        policy = spec.on_failure or OnFailure.RETRY
        if policy is OnFailure.SUSPEND:
            self._stick(key, StuckKind.STEP, node.id, scope, loop, error)
            return True
        saga = self._nearest_saga(scope, alive_only=True)
        self.error = LastError(node=node.id, error=error)
        if policy is OnFailure.TERMINATE or saga is None:
            self._fail_instance(node.id, error)
        else:
            self._unwind(saga)
        return True

    def fail_resume(self, bookmark_id: str, error: str | None) -> bool:
        """The job resuming the wait ``bookmark_id`` died: the instance fails."""
        wait = self.waits.pop(bookmark_id, None)
        if wait is None:
            return False
        self._fail_instance(wait.node, error)
        return True

    def recover(self, action: Recovery, stuck_job: str) -> bool:
        """An operator's answer to the failure left by ``stuck_job``."""
        stuck = self.stuck.pop(stuck_job, None)
        if stuck is None:
            return False
        node_id, scope, loop = stuck.node, stuck.scope, stuck.loop
        node = self.graph.node(node_id)
        if action is Recovery.ABANDON:
            self._fail_instance(node_id, stuck.error)
        elif stuck.kind is StuckKind.STEP:
            if action is Recovery.RETRY:
                self._activity_job(JobKind.STEP, node, scope, loop)
            else:
                self._done(node_id)
                if self._live(scope):
                    self.enter(node.next, scope, loop)
        elif action is Recovery.RETRY:
            self._activity_job(JobKind.COMPENSATE, node, scope, loop)
        elif scope is not None and self._compensating(scope):
            self._next_compensation(scope)
        return True

    # -- routing ----------------------------------------------------------------------

    def enter(self, node_id: str | None, scope: str | None, loop: int | None) -> None:
        """Arrive at ``node_id`` (``None``: the end of the frame ``scope``)."""
        if node_id is None:
            self._end_frame(scope)
            return
        node = self.graph.node(node_id)
        spec = node.spec
        if node.kind is Kind.ACTIVITY:
            self._activity_job(JobKind.STEP, node, scope, loop)
        elif isinstance(spec, If):
            self._done(node.id)
            taken = bool(evaluate(spec.condition, self.data))
            self.enter(node.when_true if taken else node.when_false, scope, loop)
        elif node.kind is Kind.PARALLEL:
            frame = self._open_join(node, scope, loop, len(node.branches))
            for branch in node.branches:
                self.enter(branch, frame, loop)
        elif isinstance(spec, ForEach):
            items = evaluate(spec.items, self.data)
            if not isinstance(items, list):
                raise WorkflowStepError(
                    f"the collection of ForEach {node.id!r} is not a list: {items!r}"
                )
            if not items:
                self._done(node.id)
                self.enter(node.next, scope, loop)
                return
            frame = self._open_join(node, scope, loop, len(items))
            for index in range(len(items)):
                self.enter(node.body, frame, index)
        elif isinstance(spec, Delay):
            self._run_job(JobKind.DELAY, node, scope, loop, due=self.now + spec.duration)
        elif isinstance(spec, WaitForSignal):
            self._wait(node, spec, scope, loop)
        elif isinstance(spec, Saga):
            frame = self._frame_key(node)
            self.frames[frame] = SagaFrame(
                node=node.id,
                parent=scope,
                loop=loop,
                seq=self.seq,
                completed=(),
                state=SagaState.OPEN,
                nested=spec.nested,
            )
            self.enter(node.body, frame, loop)

    def _end_frame(self, scope: str | None) -> None:
        if scope is None:
            self.ended = True
            return
        frames = self.frames
        frame = frames.get(scope)
        if frame is None:
            return
        if isinstance(frame, JoinFrame):
            if frame.remaining > 1:
                frames[scope] = replace(frame, remaining=frame.remaining - 1)
                return
        else:
            if frame.state is not SagaState.OPEN:
                return
            outer = self._nearest_saga(frame.parent, alive_only=True)
            if outer is not None and frame.nested is Nested.UNWIND:
                around = self._saga(outer)
                frames[outer] = replace(around, completed=around.completed + frame.completed)
        del frames[scope]
        node = self.graph.node(frame.node)
        self._done(node.id)
        self.enter(node.next, frame.parent, frame.loop)

    def _wait(
        self, node: GraphNode, spec: WaitForSignal, scope: str | None, loop: int | None
    ) -> None:
        correlation = evaluate(spec.correlate, self.data)
        if isinstance(correlation, int) and not isinstance(correlation, bool):
            correlation = str(correlation)
        if not isinstance(correlation, str) or not correlation:
            raise WorkflowStepError(
                f"the correlation of step {node.id!r} must be a non-empty string; "
                f"got {correlation!r}"
            )
        bookmark = BookmarkRecord(
            id=new_id(self.clock),
            instance_id=self.instance.id,
            signal_name=spec.signal,
            correlation_id=correlation,
            created_at=self.now,
            payload_type=type_name(spec.payload),
        )
        self.bookmarks.append(bookmark)
        timeout_job = None
        if spec.timeout is not None:
            timeout_job = self._run_job(
                JobKind.TIMEOUT,
                node,
                scope,
                loop,
                due=self.now + spec.timeout,
                bookmark=str(bookmark.id),
            )
        self.waits[str(bookmark.id)] = Wait(
            node=node.id,
            scope=scope,
            loop=loop,
            signal=spec.signal,
            correlation=correlation,
            timeout=str(timeout_job) if timeout_job is not None else None,
        )

    # -- sagas ------------------------------------------------------------------------

    def _unwind(self, key: str) -> None:
        """Start compensating the saga frame ``key``: sagas still open inside it are
        closed and their undo stacks folded in (they are newer work)."""
        frames = self.frames
        completed = self._saga(key).completed
        inner = sorted(
            (
                k
                for k, f in frames.items()
                if isinstance(f, SagaFrame) and k != key and self._inside(k, key)
            ),
            key=lambda k: frames[k].seq,
        )
        for inner_key in inner:
            inner_frame = self._saga(inner_key)
            if inner_frame.state is not SagaState.CLOSED:
                completed += inner_frame.completed
                frames[inner_key] = replace(inner_frame, completed=(), state=SagaState.CLOSED)
        frames[key] = replace(self._saga(key), state=SagaState.COMPENSATING, completed=completed)
        self._next_compensation(key)

    def _next_compensation(self, key: str) -> None:
        frame = self._saga(key)
        if frame.completed:
            *rest, (node_id, loop) = frame.completed
            self.frames[key] = replace(frame, completed=tuple(rest))
            self._activity_job(JobKind.COMPENSATE, self.graph.node(node_id), key, loop)
            return
        self.frames[key] = replace(frame, state=SagaState.CLOSED)
        outer = self._nearest_saga(frame.parent, alive_only=True)
        if outer is None:
            self.terminal = self.terminal or InstanceState.COMPENSATED
        elif self._saga(outer).state is SagaState.OPEN:
            self._unwind(outer)

    def _saga(self, key: str) -> SagaFrame:
        frame = self.frames[key]
        assert isinstance(frame, SagaFrame), key
        return frame

    def _compensating(self, key: str) -> bool:
        frame = self.frames.get(key)
        return isinstance(frame, SagaFrame) and frame.state is SagaState.COMPENSATING

    def _nearest_saga(self, scope: str | None, *, alive_only: bool) -> str | None:
        frames = self.frames
        key = scope
        while key is not None:
            frame = frames.get(key)
            if frame is None:
                return None
            if isinstance(frame, SagaFrame) and (
                not alive_only or frame.state is not SagaState.CLOSED
            ):
                return key
            key = frame.parent
        return None

    def _inside(self, key: str, ancestor: str) -> bool:
        frames = self.frames
        parent = frames[key].parent
        while parent is not None:
            if parent == ancestor:
                return True
            frame = frames.get(parent)
            parent = frame.parent if frame is not None else None
        return False

    def _live(self, scope: str | None) -> bool:
        """Whether routing may go on in ``scope``: every frame up to the root is open."""
        if self.terminal is not None:
            return False
        frames = self.frames
        key = scope
        while key is not None:
            frame = frames.get(key)
            if frame is None or (
                isinstance(frame, SagaFrame) and frame.state is not SagaState.OPEN
            ):
                return False
            key = frame.parent
        return True

    # -- bookkeeping ------------------------------------------------------------------

    def _open_join(self, node: GraphNode, scope: str | None, loop: int | None, count: int) -> str:
        key = self._frame_key(node)
        self.frames[key] = JoinFrame(
            node=node.id, parent=scope, loop=loop, seq=self.seq, remaining=count
        )
        return key

    def _frame_key(self, node: GraphNode) -> str:
        """The key of a new frame at ``node`` (:attr:`seq` moves on to its number)."""
        self.seq += 1
        return f"{node.id}#{self.seq}"

    def _done(self, node_id: str) -> None:
        if node_id not in self.done:
            self.done.append(node_id)

    def _stick(
        self,
        job: str,
        kind: StuckKind,
        node: str,
        scope: str | None,
        loop: int | None,
        error: str | None,
    ) -> None:
        self.stuck[job] = StuckJob(
            kind=kind, node=node, scope=scope, loop=loop, error=error, at=self.now
        )
        self.error = LastError(node=node, error=error)

    def _fail_instance(self, node: str, error: str | None) -> None:
        self.error = LastError(node=node, error=error)
        self.terminal = InstanceState.FAILED

    def _activity_job(
        self, kind: JobKind, node: GraphNode, scope: str | None, loop: int | None
    ) -> None:
        spec = node.spec
        assert isinstance(spec, Step)
        retry = spec.retry
        if kind is JobKind.STEP and spec.on_failure is OnFailure.COMPENSATE:
            retry = _NO_RETRY
        self._run_job(kind, node, scope, loop, retry=retry, timeout=spec.timeout, queue=spec.queue)

    def _run_job(
        self,
        kind: JobKind,
        node: GraphNode,
        scope: str | None,
        loop: int | None,
        *,
        due: datetime | None = None,
        retry: RetrySpec | None = None,
        timeout: timedelta | None = None,
        queue: str | None = None,
        bookmark: str | None = None,
    ) -> UUID:
        job_id = new_id(self.clock)
        self.jobs.append(
            self.job(
                job_id,
                targets.RUN,
                (str(self.instance.id), node.id),
                node=node.id,
                due=due,
                retry=retry,
                timeout=timeout,
                queue=queue,
            )
        )
        self.pending[str(job_id)] = PendingJob(
            kind=kind, node=node.id, scope=scope, loop=loop, bookmark=bookmark
        )
        return job_id

    def job(
        self,
        job_id: UUID,
        target: str,
        args: tuple[JSON, ...],
        *,
        node: str | None,
        due: datetime | None = None,
        retry: RetrySpec | None = None,
        timeout: timedelta | None = None,
        queue: str | None = None,
    ) -> JobRecord:
        """A job of this instance (its queue and retry policy unless given)."""
        return instance_job(
            self.instance,
            self.cursor,
            job_id,
            target,
            args,
            node=node,
            now=self.now,
            due=due,
            retry=retry,
            timeout=timeout,
            queue=queue,
        )


def instance_job(
    instance: WorkflowInstanceRecord,
    cursor: Cursor,
    job_id: UUID,
    target: str,
    args: tuple[JSON, ...],
    *,
    node: str | None,
    now: datetime,
    due: datetime | None = None,
    retry: RetrySpec | None = None,
    timeout: timedelta | None = None,
    queue: str | None = None,
) -> JobRecord:
    """A job of ``instance``, on the queue, retry policy and limits its cursor keeps
    unless given."""
    queue = queue or cursor.queue
    return JobRecord.from_values(  # every workflow step: the quick way
        {
            "id": job_id,
            "queue": queue,
            "limits": cursor.limits.get(queue, ()),
            "invocation": Invocation(target=target, args=args),
            "state": JobState.SCHEDULED if due is not None else JobState.ENQUEUED,
            "created_at": now,
            "due_at": due,
            "retry": retry or cursor.retry,
            "timeout": timeout,
            "tenant_id": instance.tenant_id,
            "workflow_instance_id": instance.id,
            "activity_node_id": node,
        }
    )
