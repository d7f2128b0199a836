"""The dispatcher: the module-level jobs every workflow runs on.

Each is an ordinary job. It reads its instance, runs at most one activity, and plans
what follows (:class:`~millrace_django.engine.workflow.plan.Plan`). It commits nothing
itself: the checkpoint, the next jobs and new bookmarks ride on this job's own success
(:meth:`~millrace_django.engine.job_context.JobContext.ride_on_success`), so the worker
writes them in the same atom as the job's transition. Should another branch checkpoint
first, the worker asks the plan again on the stored instance (a three-way merge of the
data, the activity is not run again).

A job its instance no longer lists (cancelled, failed, finished, moved on) runs no code.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from typing import Any
from uuid import UUID

from millrace_django.clock import Clock
from millrace_django.contract import (
    JSON,
    TERMINAL_INSTANCE_STATES,
    BookmarkRecord,
    InstanceState,
    JobRecord,
    WorkflowCheckpoint,
    WorkflowInstanceRecord,
)
from millrace_django.engine.client_slot import installed
from millrace_django.engine.job_context import JobContext, SideEffects
from millrace_django.engine.registry import job
from millrace_django.engine.workflow import targets
from millrace_django.engine.workflow.activity import ActivityContext, call_activity
from millrace_django.engine.workflow.definition import Workflow, find
from millrace_django.engine.workflow.documents import check_document
from millrace_django.engine.workflow.errors import UnknownWorkflow
from millrace_django.engine.workflow.instance_cursor import (
    Cursor,
    JobKind,
    LastError,
    Wait,
    cursor_of,
)
from millrace_django.engine.workflow.merge import copied, merge
from millrace_django.engine.workflow.plan import Plan, instance_job
from millrace_django.engine.workflow.spec import ForEach, Recovery, Step
from millrace_django.engine.workflow.store import WorkflowStore, workflow_store
from millrace_django.observability.telemetry import carry_trace

type Operation = Callable[[Plan], bool]
type Live = tuple[WorkflowInstanceRecord, Cursor]
"""An instance still running, with its cursor as read."""


@job
def run_node(instance_id: str, node: str, context: JobContext) -> None:
    """Run the position this job holds: an activity, a compensation, a timer or a
    signal's timeout."""
    storage, clock = _environment(context)
    live = _live_instance(storage, instance_id, context)
    if live is None:
        return
    instance, cursor = live
    entry = cursor.jobs.get(str(context.job_id))
    if entry is None:
        return
    workflow = _definition(instance, cursor)
    if entry.kind is JobKind.TIMEOUT:
        assert entry.bookmark is not None
        _fire_timeout(storage, clock, UUID(entry.bookmark))
        return
    before = instance.data  # read only: the merge copies what it keeps
    after = before
    if entry.kind is JobKind.STEP or entry.kind is JobKind.COMPENSATE:
        graph_node = workflow.graph.node(entry.node)
        spec = graph_node.spec
        assert isinstance(spec, Step)
        compensating = entry.kind is JobKind.COMPENSATE
        activity = spec.compensate if compensating else spec.activity
        after = copied(instance.data)
        if not isinstance(after, dict):
            after = {}
        activity_context = ActivityContext(
            data=after,
            instance_id=instance.id,
            node_id=graph_node.id,
            definition_id=instance.definition_id,
            version=instance.definition_version,
            loop_index=entry.loop,
            compensating=compensating,
            job=context,
            items=_items_of(workflow, graph_node.frame),
        )
        call_activity(activity, activity_context)
        after = check_document(
            activity_context.data, f"{'compensation' if compensating else 'step'} {node!r}"
        )
    job_id = context.job_id
    _settle(context, storage, clock, workflow, live, before, after, lambda p: p.complete(job_id))


@job
def resume(
    instance_id: str, bookmark_id: str, payload: JSON, timed_out: bool, context: JobContext
) -> None:
    """Carry a consumed bookmark into the instance: bind the payload and go on (or take
    the timeout path)."""
    storage, clock = _environment(context)
    live = _live_instance(storage, instance_id, context)
    if live is None:
        return
    instance, cursor = live
    data = instance.data  # read only: the merge copies what it keeps
    _settle(
        context,
        storage,
        clock,
        _definition(instance, cursor),
        live,
        data,
        data,
        lambda p: p.resume(bookmark_id, payload, timed_out),
    )


@job
def handle_failure(instance_id: str, job_id: str, context: JobContext) -> None:
    """A workflow job died: apply its step's failure policy (unwind the saga, suspend,
    or fail the instance)."""
    storage, clock = _environment(context)
    live = _live_instance(storage, instance_id, context)
    if live is None:
        return
    instance, cursor = live
    dead = storage.get_job(UUID(job_id))
    error = dead.last_error if dead is not None else None
    try:
        workflow = _definition(instance, cursor)
    except UnknownWorkflow as missing:
        _fail_undefined(context, instance, cursor, f"{missing}\n\nThe job that died:\n{error}")
        return
    operation: Operation
    if dead is not None and dead.invocation.target == targets.RESUME:
        bookmark_id = str(dead.invocation.args[1])
        operation = lambda p: p.fail_resume(bookmark_id, error)  # noqa: E731
    else:
        operation = lambda p: p.fail(job_id, error)  # noqa: E731
    data = instance.data  # read only: the merge copies what it keeps
    _settle(context, storage, clock, workflow, live, data, data, operation)


@job
def recover(instance_id: str, action: str, stuck_job: str, context: JobContext) -> None:
    """An operator's recovery of a suspended instance (retry, skip or abandon)."""
    storage, clock = _environment(context)
    live = _live_instance(storage, instance_id, context)
    if live is None:
        return
    choice = Recovery(action)
    instance, cursor = live
    data = instance.data  # read only: the merge copies what it keeps
    _settle(
        context,
        storage,
        clock,
        _definition(instance, cursor),
        live,
        data,
        data,
        lambda p: p.recover(choice, stuck_job),
    )


# -- inside ---------------------------------------------------------------------------


def _settle(
    context: JobContext,
    storage: WorkflowStore,
    clock: Clock,
    workflow: Workflow,
    first: Live,
    before: JSON,
    after: JSON,
    operation: Operation,
) -> None:
    """Plan ``operation`` on ``first`` and hand the result to the worker; a re-plan on
    the stored instance is attached for when another checkpoint wins the race."""
    instance_id = first[0].id

    def plan(live: Live | None) -> SideEffects:
        if live is None:
            return SideEffects()
        instance, cursor = live
        data = merge(before, after, instance.data)
        planned = Plan(workflow, instance, cursor, data if isinstance(data, dict) else {}, clock)
        if not operation(planned):
            return SideEffects()
        record = planned.finish()
        return SideEffects(
            enqueue=tuple(planned.jobs),
            checkpoint=WorkflowCheckpoint(instance=record, expected_revision=instance.revision),
            bookmarks=tuple(planned.bookmarks),
            remerge=lambda: plan(with_cursor(storage.get_instance(instance_id))),
            replan=lambda instance: plan(with_cursor(instance)),
        )

    context.ride_on_success(plan(first))


def _fail_undefined(
    context: JobContext, instance: WorkflowInstanceRecord, cursor: Cursor, error: str
) -> None:
    """Without its definition nothing can be routed: the instance fails, saying why."""
    failed = replace(
        cursor, jobs={}, waits={}, frames={}, stuck={}, error=LastError(node=None, error=error)
    )
    record = replace(
        instance,
        state=InstanceState.FAILED,
        cursor=failed.to_json(),
        updated_at=context.clock.now(),
    )
    checkpoint = WorkflowCheckpoint(instance=record, expected_revision=instance.revision)
    context.ride_on_success(SideEffects(checkpoint=checkpoint))


def _fire_timeout(storage: WorkflowStore, clock: Clock, bookmark_id: UUID) -> None:
    """Consume the wait's bookmark unless its signal did first; the winner resumes (in
    this timeout job's trace)."""
    storage.consume_bookmark_by_id(
        bookmark_id,
        lambda bookmark: carry_trace(resume_jobs(storage, clock, bookmark, None, timed_out=True)),
    )


def resume_jobs(
    storage: WorkflowStore,
    clock: Clock,
    bookmark: BookmarkRecord,
    payload: JSON,
    *,
    timed_out: bool,
) -> list[JobRecord]:
    """The job resuming the wait ``bookmark`` (its id is the bookmark's), or nothing if
    the instance no longer waits there. Called inside the consuming atom."""
    live = with_cursor(storage.get_instance(bookmark.instance_id))
    wait = waiting_at(live, bookmark)
    if live is None or wait is None:
        return []
    return [resume_job(live, wait, bookmark, payload, timed_out=timed_out, now=clock.now())]


def waiting_at(live: Live | None, bookmark: BookmarkRecord) -> Wait | None:
    """The wait of the instance that ``bookmark`` stands for, if it still waits there."""
    return live[1].waits.get(str(bookmark.id)) if live is not None else None


def resume_job(
    live: Live,
    wait: Wait,
    bookmark: BookmarkRecord,
    payload: JSON,
    *,
    timed_out: bool,
    now: datetime,
) -> JobRecord:
    """The job carrying ``payload`` (or the timeout) into the wait ``bookmark``."""
    instance, cursor = live
    return instance_job(
        instance,
        cursor,
        bookmark.id,
        targets.RESUME,
        (str(instance.id), str(bookmark.id), payload, timed_out),
        node=wait.node,
        now=now,
    )


def _environment(context: JobContext) -> tuple[WorkflowStore, Clock]:
    storage = context.storage if context.storage is not None else installed().storage
    return workflow_store(storage), context.clock


def _live_instance(storage: WorkflowStore, instance_id: str, context: JobContext) -> Live | None:
    """The instance as the worker read it with the claim, else as stored now."""
    instance = context.instance
    if instance is None or str(instance.id) != instance_id:
        instance = storage.get_instance(UUID(instance_id))
    return with_cursor(instance)


def with_cursor(instance: WorkflowInstanceRecord | None) -> Live | None:
    """``instance`` with its cursor, read once, while it is not finished (an instance
    without a cursor has nothing to route)."""
    if instance is None or instance.state in TERMINAL_INSTANCE_STATES:
        return None
    cursor = cursor_of(instance)
    return (instance, cursor) if cursor is not None else None


def _definition(instance: WorkflowInstanceRecord, cursor: Cursor) -> Workflow:
    return find(instance.definition_id, instance.definition_version, cursor.module)


def _items_of(workflow: Workflow, frame: str | None) -> Any:
    """The collection selector of the innermost ForEach around a node, if any."""
    while frame is not None:
        owner = workflow.graph.nodes[frame]
        if isinstance(owner.spec, ForEach):
            return owner.spec.items
        frame = owner.frame
    return None


def _check_targets() -> None:
    for function, target in (
        (run_node, targets.RUN),
        (resume, targets.RESUME),
        (handle_failure, targets.FAIL),
        (recover, targets.RECOVER),
    ):
        assert function.target == target, (function.target, target)


_check_targets()
