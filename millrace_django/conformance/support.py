"""Builders and helpers the facts share: fresh records, claims, transitions, racers."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any, TypeVar
from uuid import UUID

from millrace_django.clock import FakeClock
from millrace_django.conformance.harness import StoreUnderTest
from millrace_django.contract import (
    JSON,
    BookmarkRecord,
    ClaimRequest,
    InstanceState,
    Invocation,
    JobRecord,
    JobState,
    JobTransition,
    RecurringRecord,
    WorkflowInstanceRecord,
)
from millrace_django.ids import new_id

LEASE = timedelta(minutes=5)
DUMMY = Invocation(target="conformance.dummy:run", args=[1, "two"], kwargs={"three": [3]})
RACERS = 8
ROUNDS = 10

T = TypeVar("T")


def make_job(clock: FakeClock, **fields: Any) -> JobRecord:
    """A fresh ``enqueued`` job in queue ``default`` with priority 0 and no retry."""
    values: dict[str, Any] = {
        "id": new_id(clock),
        "queue": "default",
        "invocation": DUMMY,
        "state": JobState.ENQUEUED,
        "created_at": clock.now(),
    }
    values.update(fields)
    return JobRecord(**values)


def enqueue(store: StoreUnderTest, clock: FakeClock, **fields: Any) -> UUID:
    """Enqueue one fresh job and return its effective id."""
    (job_id,) = store.jobs.enqueue([make_job(clock, **fields)])
    return job_id


def claim(
    store: StoreUnderTest,
    worker: str = "w1",
    *,
    queues: Sequence[str] = ("default",),
    max_count: int = 1,
    lease: timedelta = LEASE,
) -> list[JobRecord]:
    request = ClaimRequest(
        worker_id=worker, queues=frozenset(queues), max_count=max_count, lease=lease
    )
    return store.jobs.claim(request)


def claim_one(store: StoreUnderTest, worker: str = "w1", **kwargs: Any) -> JobRecord:
    claimed = claim(store, worker, **kwargs)
    assert len(claimed) == 1, f"expected to claim one job, claimed {len(claimed)}"
    return claimed[0]


def transition(job: JobRecord, target: JobState, **fields: Any) -> JobTransition:
    """A transition fenced on ``job`` as it was claimed."""
    assert job.worker_id is not None
    values: dict[str, Any] = {
        "job_id": job.id,
        "expected_worker_id": job.worker_id,
        "expected_attempt": job.attempt,
        "target": target,
        "failures": job.failures,
    }
    values.update(fields)
    return JobTransition(**values)


def succeed(job: JobRecord, clock: FakeClock, **fields: Any) -> JobTransition:
    return transition(job, JobState.SUCCEEDED, finished_at=clock.now(), **fields)


def fail(
    job: JobRecord, clock: FakeClock, *, retry_in: timedelta, error: str = "boom", **fields: Any
) -> JobTransition:
    return transition(
        job,
        JobState.FAILED,
        failures=job.failures + 1,
        due_at=clock.now() + retry_in,
        error=error,
        **fields,
    )


def die(job: JobRecord, clock: FakeClock, *, error: str = "boom", **fields: Any) -> JobTransition:
    values: dict[str, Any] = {
        "failures": job.failures + 1,
        "finished_at": clock.now(),
        "error": error,
        "cancel_continuations": True,
    }
    values.update(fields)
    return transition(job, JobState.DEAD, **values)


def release(job: JobRecord) -> JobTransition:
    return transition(job, JobState.ENQUEUED)


def state_of(store: StoreUnderTest, job_id: UUID) -> JobState:
    job = store.jobs.get_job(job_id)
    assert job is not None, f"job {job_id} is missing"
    return job.state


def make_instance(clock: FakeClock, data: JSON = None, **fields: Any) -> WorkflowInstanceRecord:
    values: dict[str, Any] = {
        "id": new_id(clock),
        "definition_id": "order",
        "definition_version": 1,
        "state": InstanceState.RUNNING,
        "data": {"step": 0} if data is None else data,
        "created_at": clock.now(),
        "updated_at": clock.now(),
    }
    values.update(fields)
    return WorkflowInstanceRecord(**values)


def make_bookmark(clock: FakeClock, instance_id: UUID, **fields: Any) -> BookmarkRecord:
    values: dict[str, Any] = {
        "id": new_id(clock),
        "instance_id": instance_id,
        "signal_name": "approved",
        "correlation_id": "order-1",
        "created_at": clock.now(),
    }
    values.update(fields)
    return BookmarkRecord(**values)


def make_recurring(
    clock: FakeClock, recurring_id: str = "nightly", **fields: Any
) -> RecurringRecord:
    values: dict[str, Any] = {
        "id": recurring_id,
        "cron": "0 3 * * *",
        "queue": "default",
        "invocation": DUMMY,
        "next_fire_time": clock.now() + timedelta(hours=3),
        "created_at": clock.now(),
        "updated_at": clock.now(),
    }
    values.update(fields)
    return RecurringRecord(**values)


def later(instant: datetime, **delta: float) -> datetime:
    return instant + timedelta(**delta)


def race[T](store: StoreUnderTest, actions: Sequence[Callable[[], T]]) -> list[T]:
    """Run ``actions`` on their own threads, released together by a barrier.

    Returns their results positionally; re-raises the first exception any racer raised.
    Bounded: every racer must finish within 60 seconds.
    """
    barrier = threading.Barrier(len(actions))
    results: list[Any] = [None] * len(actions)
    errors: list[BaseException] = []

    def run(position: int, action: Callable[[], T]) -> None:
        try:
            barrier.wait(timeout=30)
            results[position] = action()
        except BaseException as error:  # reported to the test thread below
            errors.append(error)
        finally:
            store.end_thread()

    threads = [
        threading.Thread(target=run, args=(i, a), daemon=True) for i, a in enumerate(actions)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
        assert not thread.is_alive(), "a racer did not finish within 60 seconds"
    if errors:
        raise errors[0]
    return results


def with_fields[T](record: T, **fields: Any) -> T:
    return replace(record, **fields)  # type: ignore[type-var]
