"""Batch completion callbacks: one job run once every job of a batch is terminal.

``client.batch(on_complete=fn)`` stores, in the same atom as the batch's jobs, a
*watcher* (:func:`watch_batch`, an ordinary job on the callback's queue) carrying the
batch's job ids and the callback, already bound and validated. The watcher reads those
jobs; it commits nothing itself but hands one job to its own success transition
(:meth:`~millrace_django.engine.job_context.JobContext.ride_on_success`):

- every batch job terminal: the callback, called with the batch's ``batch_id`` and the
  counts ``succeeded``, ``dead`` and ``cancelled`` as keywords;
- otherwise: the next watcher, scheduled after a backoff (1 s doubling to 30 s), carrying
  only the jobs still unfinished and the counts so far.

Since that insert rides the watcher's fenced transition, a watcher that runs twice (a
lost lease) still produces one successor, hence one callback. Each watcher holds the
idempotency key ``millrace-batch:<batch id>``; its own terminal release is visible to
its transition's inserts, so the successor takes the key over.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from uuid import UUID

from millrace_django.clock import Clock
from millrace_django.contract import (
    JSON,
    TERMINAL_JOB_STATES,
    Invocation,
    JobRecord,
    JobState,
    RetryKind,
    RetrySpec,
)
from millrace_django.engine.client_slot import installed
from millrace_django.engine.job_context import JobContext, SideEffects
from millrace_django.engine.registry import job
from millrace_django.engine.retry import Retry
from millrace_django.ids import new_id

FIRST_POLL = timedelta(seconds=1)
"""How long after the batch is stored the first watcher runs."""
MAX_POLL = timedelta(seconds=30)
"""The longest wait between two watchers (the delay doubles from :data:`FIRST_POLL`)."""
COUNT_NAMES = ("succeeded", "dead", "cancelled")
"""The keywords the callback receives the counts as (with ``batch_id``)."""
CALLBACK_KEYWORDS = frozenset({"batch_id", *COUNT_NAMES})
WATCHER_RETRY = Retry.exponential(10, base=timedelta(seconds=1), max=timedelta(minutes=5))
"""A watcher only fails on a storage error; it retries for a while before giving up."""


def watcher_key(batch_id: UUID | str) -> str:
    """The idempotency key every watcher of ``batch_id`` holds."""
    return f"millrace-batch:{batch_id}"


@dataclass(frozen=True, slots=True, kw_only=True)
class Callback:
    """The callback job, bound and validated at batch creation, minus the counts."""

    invocation: Invocation
    queue: str
    priority: int
    retry: RetrySpec
    timeout: timedelta | None
    idempotency_key: str | None
    hard_timeout: timedelta | None = None

    def to_json(self) -> dict[str, JSON]:
        return {
            "target": self.invocation.target,
            "args": list(self.invocation.args),
            "kwargs": dict(self.invocation.kwargs),
            "queue": self.queue,
            "priority": self.priority,
            "retry": {
                "kind": self.retry.kind.value,
                "max_attempts": self.retry.max_attempts,
                "base_delay": self.retry.base_delay.total_seconds(),
                "max_delay": self.retry.max_delay.total_seconds(),
                "jitter": self.retry.jitter,
                "retry_on": list(self.retry.retry_on),
                "give_up_on": list(self.retry.give_up_on),
            },
            "timeout": None if self.timeout is None else self.timeout.total_seconds(),
            "hard_timeout": None
            if self.hard_timeout is None
            else self.hard_timeout.total_seconds(),
            "idempotency_key": self.idempotency_key,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Callback:
        retry = data["retry"]
        timeout, hard_timeout = data["timeout"], data.get("hard_timeout")
        return cls(
            invocation=Invocation(
                target=data["target"], args=tuple(data["args"]), kwargs=dict(data["kwargs"])
            ),
            queue=data["queue"],
            priority=data["priority"],
            retry=RetrySpec(
                kind=RetryKind(retry["kind"]),
                max_attempts=retry["max_attempts"],
                base_delay=timedelta(seconds=retry["base_delay"]),
                max_delay=timedelta(seconds=retry["max_delay"]),
                jitter=retry["jitter"],
                retry_on=tuple(retry.get("retry_on", ())),
                give_up_on=tuple(retry.get("give_up_on", ())),
            ),
            timeout=None if timeout is None else timedelta(seconds=timeout),
            hard_timeout=None if hard_timeout is None else timedelta(seconds=hard_timeout),
            idempotency_key=data["idempotency_key"],
        )

    def record(
        self, batch_id: str, counts: Mapping[str, int], *, tenant: str | None, clock: Clock
    ) -> JobRecord:
        """The callback job to enqueue, called with the batch's counts."""
        kwargs: dict[str, JSON] = dict(self.invocation.kwargs)
        kwargs.update({name: counts[name] for name in COUNT_NAMES}, batch_id=batch_id)
        return JobRecord(
            id=new_id(clock),
            queue=self.queue,
            invocation=Invocation(
                target=self.invocation.target, args=self.invocation.args, kwargs=kwargs
            ),
            state=JobState.ENQUEUED,
            created_at=clock.now(),
            priority=self.priority,
            retry=self.retry,
            timeout=self.timeout,
            hard_timeout=self.hard_timeout,
            idempotency_key=self.idempotency_key,
            tenant_id=tenant,
        )


def zero_counts() -> dict[str, int]:
    return dict.fromkeys(COUNT_NAMES, 0)


def watcher_record(
    batch_id: str,
    job_ids: Sequence[str],
    counts: Mapping[str, int],
    callback: Callback,
    *,
    delay: timedelta,
    tenant: str | None,
    clock: Clock,
) -> JobRecord:
    """A watcher of ``job_ids`` due after ``delay``, on the callback's queue."""
    now = clock.now()
    return JobRecord(
        id=new_id(clock),
        queue=callback.queue,
        invocation=Invocation(
            target=watch_batch.target,
            args=(batch_id,),
            kwargs={
                "job_ids": list(job_ids),
                "counts": dict(counts),
                "callback": callback.to_json(),
                "poll_seconds": delay.total_seconds(),
            },
        ),
        state=JobState.SCHEDULED,
        created_at=now,
        priority=callback.priority,
        due_at=now + delay,
        retry=WATCHER_RETRY,
        idempotency_key=watcher_key(batch_id),
        tenant_id=tenant,
    )


@job
def watch_batch(
    batch_id: str,
    *,
    job_ids: list[str],
    counts: dict[str, int],
    callback: dict[str, Any],
    poll_seconds: float,
    context: JobContext,
) -> dict[str, JSON]:
    """Count the batch's finished jobs; enqueue the callback once all are terminal, or
    the next watcher otherwise (both ride this job's success)."""
    storage = context.storage if context.storage is not None else installed().storage
    counted = {name: int(counts.get(name, 0)) for name in COUNT_NAMES}
    pending: list[str] = []
    for job_id in job_ids:
        record = storage.get_job(UUID(job_id))
        if record is None:
            continue  # deleted (purged) after it finished: terminal, but in no count
        if record.state not in TERMINAL_JOB_STATES:
            pending.append(job_id)
        elif record.state is JobState.SUCCEEDED:
            counted["succeeded"] += 1
        elif record.state is JobState.DEAD:
            counted["dead"] += 1
        else:
            counted["cancelled"] += 1
    bound = Callback.from_json(callback)
    if pending:
        wait = min(timedelta(seconds=poll_seconds) * 2, MAX_POLL)
        follow = watcher_record(
            batch_id,
            pending,
            counted,
            bound,
            delay=wait,
            tenant=context.tenant,
            clock=context.clock,
        )
    else:
        follow = bound.record(batch_id, counted, tenant=context.tenant, clock=context.clock)
    context.ride_on_success(SideEffects(enqueue=(follow,)))
    result: dict[str, JSON] = {"pending": len(pending), **counted}
    if not pending:
        result["callback_job_id"] = str(follow.id)
    return result
