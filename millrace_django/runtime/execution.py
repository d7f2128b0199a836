"""The one path from a claimed job to the transition that ends its attempt.

The worker (on its threads) and the test runner (on the caller's thread) both call
:func:`run_claimed`, so a job ends the same way under both: the engine's outcome rules
decide, this module only sequences them.

An atomic job (``@job(atomic=True)``) runs inside a transaction of its storage, and its
success is applied in that same transaction, last: the job's writes on that database
and its ``succeeded`` commit together, or, when the fence is lost (another worker owns
the job now), neither does. The fence is checked at the end only, so the job row is not
locked while the function runs and the heartbeat renews the lease meanwhile, on its own
connection. Any other ending (a failure, a retry, a cancellation) rolls the job's
writes back and is written the usual way.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import cast
from uuid import UUID

from millrace_django.clock import Clock
from millrace_django.contract import (
    JobLogLine,
    JobRecord,
    JobState,
    JobStorage,
    JobTransition,
    ProgressReport,
    WorkflowInstanceRecord,
)
from millrace_django.contract.transactions import JoinableTransactions
from millrace_django.engine import (
    EngineConfig,
    JobContext,
    PreparedJob,
    UnrunnableJob,
    lookup,
    outcomes,
    prepare,
    run_handler_async,
)
from millrace_django.engine.atomic import atomic_refusal
from millrace_django.engine.outcomes import Observers
from millrace_django.errors import ConcurrencyConflict, StorageError
from millrace_django.observability.telemetry import Observed
from millrace_django.runtime.isolation import run_attempt

logger = logging.getLogger(__name__)

REMERGE_ATTEMPTS = 5
"""Re-merges of a conflicting workflow checkpoint before the job is released."""

ATOMIC_CHECKPOINT = (
    "an atomic job cannot save a checkpoint: a failed attempt's writes roll back, so its "
    "retry starts afresh anyway, and the write would lock the job's row until the job "
    "ends (its worker could not renew its leases meanwhile)"
)


@dataclass(frozen=True, slots=True)
class Outcome:
    """How an attempt ended: the transition to write (``None``: write nothing, another
    worker owns the job) and the exception the job raised, if any."""

    transition: JobTransition | None
    error: BaseException | None = None
    written: bool | None = None
    """``None``: the caller writes :attr:`transition`. Otherwise an atomic job's own
    transaction applied it, and this is what the fence said: ``True``, committed with
    the job's writes; ``False``, lost, and everything the attempt wrote rolled back."""


def run_claimed(
    job: JobRecord,
    context: JobContext,
    *,
    clock: Clock,
    config: EngineConfig,
    loop: asyncio.AbstractEventLoop | None = None,
) -> Outcome:
    """Decide, run if allowed, and return the outcome of one claimed job.

    A job that cannot start (target gone, arguments no longer fit) is dead at once. A
    cancel request or a poison pill ends it without running. Once ``context`` has been
    cancelled, the reason decides, whatever the function returned or raised: a job told
    to stop may have stopped half-way. Every exception the function raises is its
    failure, ``KeyboardInterrupt`` and ``SystemExit`` included: a worker's own stop
    never reaches a job as an exception (its signals become stop requests, see
    :mod:`~millrace_django.runtime.shutdown`), so one raised there is the job's doing,
    and letting it out would end the worker's thread instead of the attempt (the job
    would stay ``processing`` until its lease lapsed). Meanwhile ``job`` is the
    current job of its log records, and its attempt is traced and measured when
    OpenTelemetry is on (:mod:`millrace_django.observability`); the jobs its transition
    creates then continue its trace.
    """
    with Observed(job, clock) as observed:
        started = _start(job, context, clock=clock, config=config)
        if isinstance(started, Outcome):
            return _seen(observed, started)
        prepared = started
        if prepared.definition.atomic:
            outcome = _atomically(
                job,
                context,
                lambda: _attempt(job, prepared, context, observed, clock, config, loop),
                clock=clock,
                config=config,
            )
        else:
            outcome = _attempt(job, prepared, context, observed, clock, config, loop)
        observed.end(outcome.transition, outcome.error)
        return outcome


def _attempt(
    job: JobRecord,
    prepared: PreparedJob,
    context: JobContext,
    observed: Observed,
    clock: Clock,
    config: EngineConfig,
    loop: asyncio.AbstractEventLoop | None,
) -> Outcome:
    """Call the function and decide the outcome (see :func:`run_claimed`)."""
    error: BaseException | None = None
    result: object = None
    try:
        result = run_attempt(job, prepared, context, loop=loop)
    except BaseException as raised:  # the job's failure, whatever it is (see run_claimed)
        error = raised
    outcome = _end(job, context, prepared, error, result, clock=clock, config=config)
    return _carried(observed, outcome)


async def run_claimed_async(
    job: JobRecord, context: JobContext, *, clock: Clock, config: EngineConfig
) -> Outcome:
    """:func:`run_claimed` on the running event loop: the job's coroutine is awaited
    here, holding no thread while it waits. What ends this coroutine itself rather than
    the job propagates (:func:`_ends_the_awaiting_task`); anything else the job raises
    is its failure."""
    with Observed(job, clock) as observed:
        started = _start(job, context, clock=clock, config=config)
        if isinstance(started, Outcome):
            return _seen(observed, started)
        error: BaseException | None = None
        result: object = None
        try:
            result = await run_handler_async(started, context)
        except BaseException as raised:
            if _ends_the_awaiting_task(raised):
                raise
            error = raised
        outcome = _end(job, context, started, error, result, clock=clock, config=config)
        return _seen(observed, outcome)


def _ends_the_awaiting_task(error: BaseException) -> bool:
    """Whether ``error`` stops the coroutine awaiting the job, not the job: it is being
    closed (``GeneratorExit``), or its task was cancelled (a ``CancelledError`` while
    the task counts a cancel request: the worker abandoned the job, or its loop is
    closing). A ``CancelledError`` the job raised of its own is its failure. (A
    ``KeyboardInterrupt`` or ``SystemExit`` is the job's too: caught here, it never
    reaches the loop, which would re-raise it out of its thread.)"""
    if isinstance(error, GeneratorExit):
        return True
    if isinstance(error, asyncio.CancelledError):
        task = asyncio.current_task()
        return task is not None and task.cancelling() > 0
    return False


def _seen(observed: Observed, outcome: Outcome) -> Outcome:
    """``outcome``, its new jobs continuing the attempt's trace, recorded as its end."""
    outcome = _carried(observed, outcome)
    observed.end(outcome.transition, outcome.error)
    return outcome


def _carried(observed: Observed, outcome: Outcome) -> Outcome:
    """``outcome``, its new jobs continuing the attempt's trace."""
    transition = observed.carry(outcome.transition)
    if transition is not outcome.transition:
        outcome = Outcome(transition, outcome.error)
    return outcome


class _RolledBack(Exception):
    """Leaves an atomic job's transaction, rolling it back, with the attempt's outcome."""

    def __init__(self, outcome: Outcome) -> None:
        super().__init__("rolled back")
        self.outcome = outcome


def _atomically(
    job: JobRecord,
    context: JobContext,
    attempt: Callable[[], Outcome],
    *,
    clock: Clock,
    config: EngineConfig,
) -> Outcome:
    """Run an atomic job's ``attempt`` in a transaction of its storage, applying a
    success in that transaction, after the progress it buffered; anything else rolls
    back. A success whose fence was lost comes back ``written=False``. A success that
    cannot be written or committed (the job left its transaction broken, a deferred
    constraint failed at commit, the connection dropped) is the attempt's failure: its
    writes are gone, or, if the commit did land, the failure's fence is lost. A
    transaction that cannot even begin raises: the job did not run, and its lease will
    lapse."""
    storage = cast("JobStorage", context.storage)  # one that joins (refused in _start)
    transactions = cast("JoinableTransactions", storage)
    context.refuse_checkpoints(ATOMIC_CHECKPOINT)
    ran = False
    try:
        with transactions.transaction():
            ran = True
            outcome = attempt()
            transition = outcome.transition
            if transition is None or transition.target is not JobState.SUCCEEDED:
                raise _RolledBack(outcome)
            flush_progress(storage, job, context)
            # apply_many: a plain success takes the acknowledger's one-statement path.
            (written,) = storage.apply_many([transition])
            if isinstance(written, StorageError):
                raise written
            if not written:
                raise _RolledBack(Outcome(transition, written=False))
        return Outcome(transition, written=True)
    except _RolledBack as rolled_back:
        return rolled_back.outcome
    except Exception as error:
        if not ran:
            raise
        logger.warning("job %s: its success could not be committed", job.id, exc_info=True)
        failure = outcomes.failed(
            job, error, clock=clock, config=config, observers=observers_of(job)
        )
        return Outcome(failure, error)


def _start(
    job: JobRecord, context: JobContext, *, clock: Clock, config: EngineConfig
) -> Outcome | PreparedJob:
    """The job made runnable, or the outcome that ends it without running."""
    try:
        prepared = prepare(job)
    except UnrunnableJob as error:
        verdict = outcomes.before_run(job, clock=clock, config=config)
        return Outcome(verdict or outcomes.unrunnable(job, error, clock=clock, config=config))
    observers = prepared.definition.failure_observers
    verdict = outcomes.before_run(job, clock=clock, config=config, observers=observers)
    if verdict is not None:
        return Outcome(verdict)
    if context.cancel_reason is not None:
        return Outcome(cancellation_outcome(job, context, clock=clock, config=config))
    refusal = atomic_refusal(prepared.definition, context.storage, job.hard_timeout)
    if refusal is not None:  # stored by a process that could not tell (see engine.atomic)
        dead = outcomes.unrunnable(job, refusal, clock=clock, config=config, observers=observers)
        return Outcome(dead, refusal)
    return prepared


def _end(
    job: JobRecord,
    context: JobContext,
    prepared: PreparedJob,
    error: BaseException | None,
    result: object,
    *,
    clock: Clock,
    config: EngineConfig,
) -> Outcome:
    """The outcome of a function that raised ``error`` or returned ``result``."""
    if context.cancel_reason is not None:
        return Outcome(cancellation_outcome(job, context, clock=clock, config=config), error)
    observers = prepared.definition.failure_observers
    if error is not None:
        failure = outcomes.failed(job, error, clock=clock, config=config, observers=observers)
        return Outcome(failure, error)
    return Outcome(
        outcomes.succeeded(
            job,
            result,
            clock=clock,
            config=config,
            observers=observers,
            effects=context.side_effects,
        )
    )


def chain_checkpoints(
    writes: Sequence[tuple[JobContext, JobTransition]],
) -> list[JobTransition]:
    """The transitions of ``writes``, those checkpointing an instance already
    checkpointed earlier in the list re-planned onto the state that one leaves (the
    steps of a fan-out finish together: written as planned, every sibling but one would
    lose the revision race and re-merge on a fresh read). Each still expects its own
    revision, so the batch applies them in order as if one after the other; a sibling
    whose predecessor is not written then conflicts and re-merges as before."""
    after: dict[UUID, WorkflowInstanceRecord] = {}
    chained: list[JobTransition] = []
    for context, transition in writes:
        checkpoint = transition.checkpoint
        effects = context.side_effects
        if checkpoint is not None and effects is not None:
            previous = after.get(checkpoint.instance.id)
            if previous is not None and effects.replan is not None:
                try:
                    replanned = effects.replan(previous)
                except Exception:  # written as planned: it conflicts and re-merges
                    logger.exception("job %s: planning it onto its sibling failed", context.job_id)
                    chained.append(transition)
                    continue
                context.side_effects = replanned
                transition = outcomes.with_side_effects(transition, replanned)
                checkpoint = transition.checkpoint
            if checkpoint is not None:
                after[checkpoint.instance.id] = replace(
                    checkpoint.instance, revision=checkpoint.expected_revision + 1
                )
        chained.append(transition)
    return chained


def remerge(
    storage: JobStorage,
    job: JobRecord,
    context: JobContext,
    transition: JobTransition,
    result: bool | StorageError,
) -> tuple[JobTransition, bool | StorageError]:
    """Re-apply a success whose workflow checkpoint lost its revision race.

    While the result is a :class:`~millrace_django.errors.ConcurrencyConflict` and the
    job's side effects can be recomputed against the stored instance, they are, and the
    transition is applied again (at most :data:`REMERGE_ATTEMPTS` times; the job's
    function does not run again). Still conflicting after that, the job is released to
    run again, which spends no retry budget. Returns what was applied last and its result.
    """
    effects = context.side_effects
    for _ in range(REMERGE_ATTEMPTS):
        if not isinstance(result, ConcurrencyConflict) or effects is None:
            return transition, result
        if effects.remerge is None:
            return transition, result
        try:
            effects = effects.remerge()
            context.side_effects = effects
            transition = outcomes.with_side_effects(transition, effects)
            result = storage.apply(transition)
        except StorageError as error:
            result = error
        except Exception as error:
            logger.exception("job %s: re-merging its workflow checkpoint failed", job.id)
            return transition, StorageError(f"re-merge failed: {error}")
    if not isinstance(result, ConcurrencyConflict):
        return transition, result
    logger.warning(
        "job %s: its workflow checkpoint still conflicted after %d re-merges; releasing it",
        job.id,
        REMERGE_ATTEMPTS,
    )
    release = outcomes.released(job)
    try:
        return release, storage.apply(release)
    except StorageError as error:
        return release, error


def cancellation_outcome(
    job: JobRecord, context: JobContext, *, clock: Clock, config: EngineConfig
) -> JobTransition | None:
    """What a cancelled attempt writes, by the reason its cancellation fired."""
    reason = context.cancel_reason
    if reason is None:
        raise ValueError(f"job {job.id} was not cancelled")
    return outcomes.after_cancellation(
        job, reason, clock=clock, config=config, observers=observers_of(job)
    )


def observers_of(job: JobRecord) -> Observers:
    """The failure observers of ``job``'s definition, if it is registered here."""
    definition = lookup(job.invocation.target)
    return definition.failure_observers if definition is not None else ()


def progress_report(job: JobRecord, context: JobContext) -> ProgressReport | None:
    """The progress and log lines buffered since the last report, fenced by the claim;
    ``None`` when there is nothing new."""
    report = context.take_report()
    if report.progress is None and not report.logs:
        return None
    if job.worker_id is None:
        raise ValueError(f"job {job.id} is not claimed")
    return ProgressReport(
        job_id=job.id,
        worker_id=job.worker_id,
        attempt=job.attempt,
        progress=report.progress,
        logs=tuple(JobLogLine(at=line.at, message=line.message) for line in report.logs),
    )


def flush_progress(storage: JobStorage, job: JobRecord, context: JobContext) -> bool | None:
    """Write what ``context`` buffered; ``None`` if nothing was, ``False`` if the fence
    was lost (the claim is no longer ours)."""
    report = progress_report(job, context)
    return None if report is None else storage.report_progress(report)
