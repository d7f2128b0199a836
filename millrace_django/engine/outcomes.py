"""Outcome rules: what a claimed job's run (or non-run) turns into, as a transition.

Shared by the worker and the test runner so both decide identically. Each function takes
the job *as claimed* (state ``processing``, its worker and attempt form the fence) and
returns the :class:`~millrace_django.contract.JobTransition` to apply; nothing here
touches storage. Retry math spends ``failures``, never ``attempt``: interruptions are
free, and a job interrupted too often is a poison pill.
"""

from __future__ import annotations

import json
import random as _random
from collections.abc import Callable, Collection, Sequence
from dataclasses import replace
from datetime import timedelta
from typing import Any, cast

from millrace_django.clock import Clock
from millrace_django.contract import (
    JSON,
    Invocation,
    JobRecord,
    JobState,
    JobTransition,
)
from millrace_django.engine.engine_settings import EngineConfig
from millrace_django.engine.errors import FailedInChild, HardTimeoutExceeded, JobTimedOut
from millrace_django.engine.invocation import find
from millrace_django.engine.job_context import CancelReason, SideEffects
from millrace_django.engine.jsonvalues import json_problem, storable_text
from millrace_django.engine.limits import limits_of_call
from millrace_django.engine.registry import JobDefinition, JobOptions
from millrace_django.engine.retry import gives_up, next_delay, raised_classes
from millrace_django.engine.tracebacks import job_traceback
from millrace_django.engine.workflow.failure import failure_jobs
from millrace_django.ids import new_id

MAX_ERROR_LENGTH = 8192
CANCELLED_BY_REQUEST = "Cancelled by request."
_TRUNCATED = "\n... (truncated) ...\n"

_AS_STORED = (bool, int)
"""Result types that JSON stores unchanged (floats are checked: NaN is not JSON; text
too, unless it holds no U+0000)."""

_SUCCESS_DEFAULTS = JobTransition.defaults_besides(
    [
        *("job_id", "expected_worker_id", "expected_attempt", "target", "failures"),
        *("result", "finished_at", "activate_continuations"),
    ]
)
"""The fields of a success's transition that :func:`succeeded` leaves to their defaults."""

type Observers = Sequence[JobDefinition[..., Any] | str]
"""A job's ``failure_observers``; each is enqueued with the dead job's id when it dies."""


def is_poison_pill(job: JobRecord, interruption_limit: int) -> bool:
    """Claimed more than ``interruption_limit`` times beyond its recorded failures."""
    return job.attempt - job.failures > interruption_limit


def before_run(
    job: JobRecord, *, clock: Clock, config: EngineConfig, observers: Observers = ()
) -> JobTransition | None:
    """The verdict for a job that must not run at all, or ``None`` to run it.

    A cancel request wins (the job was flagged, then its lease expired and it was
    reclaimed); then the poison-pill rule.
    """
    if job.cancel_requested:
        return cancelled(job, clock=clock)
    if is_poison_pill(job, config.interruption_limit):
        return _dead(
            job,
            f"Poison-pill: claimed {job.attempt} times with only {job.failures} recorded "
            "failures — presumed to crash workers.",
            failures=job.failures,
            clock=clock,
            config=config,
            observers=observers,
        )
    return None


def succeeded(
    job: JobRecord,
    result: object,
    *,
    clock: Clock,
    config: EngineConfig,
    observers: Observers = (),
    effects: SideEffects | None = None,
) -> JobTransition:
    """Success with a JSON ``result``; a result JSON cannot store unchanged is a failure.

    ``effects`` (a workflow step's checkpoint, next jobs and bookmarks) ride along."""
    stored: JSON
    if (
        result is None
        or type(result) in _AS_STORED
        or (type(result) is str and "\x00" not in result)
    ):
        stored = cast(JSON, result)  # JSON holds it as it is: nothing to copy (most return None)
    else:
        problem = json_problem(result)
        if problem is not None:
            return _failure(
                job,
                unstorable_result(problem),
                clock=clock,
                config=config,
                observers=observers,
            )
        stored = json.loads(json.dumps(result))
    values = _fence(job)  # every job that succeeds: the quick way
    values.update(_SUCCESS_DEFAULTS)
    values["target"] = JobState.SUCCEEDED
    values["failures"] = job.failures
    values["result"] = stored
    values["finished_at"] = clock.now()
    values["activate_continuations"] = True
    transition = JobTransition.from_complete(values)
    return with_side_effects(transition, effects) if effects is not None else transition


def unstorable_result(problem: str) -> str:
    """The error of a job whose result JSON cannot store (``problem`` says why)."""
    return f"The job returned a value that cannot be stored as its result: it {problem}."


def with_side_effects(transition: JobTransition, effects: SideEffects) -> JobTransition:
    """``transition`` carrying ``effects`` instead of any it carried before."""
    return replace(
        transition,
        enqueue=tuple(effects.enqueue),
        checkpoint=effects.checkpoint,
        bookmarks=tuple(effects.bookmarks),
    )


def failed(
    job: JobRecord,
    error: BaseException,
    *,
    clock: Clock,
    config: EngineConfig,
    observers: Observers = (),
    traceback_text: str | None = None,
    random: Callable[[], float] = _random.random,
) -> JobTransition:
    """A raised exception: retry after the policy's delay, or dead when it is spent or
    the policy's exception filters give up on ``error``. A hard timeout's kill is stored
    as its message; a failure in the job's child process as the text it sent back."""
    if isinstance(error, FailedInChild):
        text, classes = _truncate(storable_text(error.text)), error.class_names
    elif isinstance(error, HardTimeoutExceeded):
        text, classes = str(error), raised_classes(error)
    else:
        text, classes = error_text(error, traceback_text), raised_classes(error)
    return _failure(
        job, text, clock=clock, config=config, observers=observers, random=random, classes=classes
    )


def timed_out(
    job: JobRecord,
    timeout: timedelta,
    *,
    clock: Clock,
    config: EngineConfig,
    observers: Observers = (),
    random: Callable[[], float] = _random.random,
) -> JobTransition:
    """Ran past ``timeout``: an ordinary failure with a plain message (a
    :class:`JobTimedOut` to the retry policy's exception filters)."""
    error = JobTimedOut(timeout)
    return _failure(
        job,
        str(error),
        clock=clock,
        config=config,
        observers=observers,
        random=random,
        classes=raised_classes(error),
    )


def unrunnable(
    job: JobRecord,
    error: Exception,
    *,
    clock: Clock,
    config: EngineConfig,
    observers: Observers = (),
) -> JobTransition:
    """The job cannot start (target gone, arguments no longer fit): dead at once,
    since retrying cannot fix it. Counts as a failure."""
    return _dead(
        job,
        _truncate(str(error)),
        failures=job.failures + 1,
        clock=clock,
        config=config,
        observers=observers,
    )


def released(job: JobRecord) -> JobTransition:
    """Give the job back (shutdown): claimable again, no retry budget spent. The attempt
    counts as an interruption towards the poison-pill verdict: it ran."""
    return JobTransition(**_fence(job), target=JobState.ENQUEUED, failures=job.failures)


def given_back(job: JobRecord) -> JobTransition:
    """Give back a claim whose function never started: claimable again with its attempt
    given back, so it is no interruption (see ``JobTransition.unstarted``)."""
    return JobTransition(
        **_fence(job), target=JobState.ENQUEUED, failures=job.failures, unstarted=True
    )


def cancelled(job: JobRecord, *, clock: Clock) -> JobTransition:
    """Honour a cancel request; its awaiting continuations are cancelled too."""
    return JobTransition(
        **_fence(job),
        target=JobState.CANCELLED,
        failures=job.failures,
        error=CANCELLED_BY_REQUEST,
        finished_at=clock.now(),
        cancel_continuations=True,
    )


def after_cancellation(
    job: JobRecord,
    reason: CancelReason,
    *,
    clock: Clock,
    config: EngineConfig,
    observers: Observers = (),
) -> JobTransition | None:
    """What to write once a running job's cancellation fired, by reason (``None``:
    another worker owns the job now, so write nothing)."""
    if reason is CancelReason.REQUESTED:
        return cancelled(job, clock=clock)
    if reason is CancelReason.TIMEOUT:
        if job.timeout is None:
            raise ValueError(f"job {job.id} timed out but has no timeout")
        return timed_out(job, job.timeout, clock=clock, config=config, observers=observers)
    if reason is CancelReason.SHUTDOWN:
        return released(job)
    return None


def failure_observer_jobs(
    job: JobRecord, observers: Observers, *, clock: Clock, config: EngineConfig
) -> list[JobRecord]:
    """One ``enqueued`` job per observer, called with the dead job's id as a string.

    An observer named by a target that no longer resolves is still enqueued with the
    default options; it then dies with a clear error of its own instead of hiding this one.
    """
    now = clock.now()
    jobs = []
    for observer in observers:
        definition = find(observer) if isinstance(observer, str) else observer
        target = observer if isinstance(observer, str) else observer.target
        options = definition.options if definition is not None else JobOptions()
        queue = options.queue or config.default_queue
        invocation = Invocation(target=target, args=(str(job.id),))
        jobs.append(
            JobRecord(
                id=new_id(clock),
                queue=queue,
                invocation=invocation,
                state=JobState.ENQUEUED,
                created_at=now,
                priority=options.priority or 0,
                retry=options.retry_policy(config.default_retry),
                timeout=options.timeout,
                hard_timeout=options.hard_timeout,
                tenant_id=job.tenant_id,
                limits=limits_of_call(definition, queue, invocation, config.queue_limits),
            )
        )
    return jobs


def error_text(error: BaseException, traceback_text: str | None = None) -> str:
    """The stored error: the traceback from the job's own call on
    (:func:`~millrace_django.engine.tracebacks.job_traceback`), at most
    :data:`MAX_ERROR_LENGTH` long, NUL characters escaped (:func:`storable_text`)."""
    if traceback_text is None:
        traceback_text = job_traceback(error)
    return _truncate(storable_text(traceback_text))


def _truncate(text: str) -> str:
    """Keep both ends: Python puts the failing frame and the message last."""
    if len(text) <= MAX_ERROR_LENGTH:
        return text
    head = MAX_ERROR_LENGTH // 4
    tail = MAX_ERROR_LENGTH - head - len(_TRUNCATED)
    return text[:head] + _TRUNCATED + text[-tail:]


def _failure(
    job: JobRecord,
    text: str,
    *,
    clock: Clock,
    config: EngineConfig,
    observers: Observers,
    random: Callable[[], float] = _random.random,
    classes: Collection[str] | None = None,
) -> JobTransition:
    """A failure; ``classes``: the raised exception's (see :func:`gives_up`)."""
    failures = job.failures + 1
    delay = None if gives_up(job.retry, classes) else next_delay(job.retry, failures, random=random)
    if delay is None:
        return _dead(job, text, failures=failures, clock=clock, config=config, observers=observers)
    return JobTransition(
        **_fence(job),
        target=JobState.FAILED,
        failures=failures,
        due_at=clock.now() + delay,
        error=text,
    )


def _dead(
    job: JobRecord,
    text: str,
    *,
    failures: int,
    clock: Clock,
    config: EngineConfig,
    observers: Observers,
) -> JobTransition:
    return JobTransition(
        **_fence(job),
        target=JobState.DEAD,
        failures=failures,
        error=text,
        finished_at=clock.now(),
        enqueue=[
            *failure_observer_jobs(job, observers, clock=clock, config=config),
            *failure_jobs(job, clock=clock, retry=config.default_retry),
        ],
        cancel_continuations=True,
    )


def _fence(job: JobRecord) -> dict[str, Any]:
    if job.state is not JobState.PROCESSING or job.worker_id is None:
        raise ValueError(f"job {job.id} is {job.state.value}, not claimed by a worker")
    return {
        "job_id": job.id,
        "expected_worker_id": job.worker_id,
        "expected_attempt": job.attempt,
    }
