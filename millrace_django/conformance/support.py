"""Builders and helpers the facts share: fresh records, claims, transitions, lookups,
assertions, paging and racers."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any, Protocol, TypeVar
from uuid import UUID

from millrace_django.clock import FakeClock
from millrace_django.conformance.harness import StoreUnderTest
from millrace_django.contract import (
    JSON,
    BookmarkRecord,
    ClaimRequest,
    InstanceState,
    Invocation,
    JobDetails,
    JobQuery,
    JobRecord,
    JobState,
    JobTransition,
    Page,
    RecurringQuery,
    RecurringRecord,
    WorkflowInstanceRecord,
)
from millrace_django.ids import new_id

LEASE = timedelta(minutes=5)
DUMMY = Invocation(target="conformance.dummy:run", args=[1, "two"], kwargs={"three": [3]})

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
    """Claim up to ``max_count`` jobs of ``queues`` as ``worker``."""
    request = ClaimRequest(
        worker_id=worker, queues=frozenset(queues), max_count=max_count, lease=lease
    )
    return store.jobs.claim(request)


def claim_one(store: StoreUnderTest, worker: str = "w1", **kwargs: Any) -> JobRecord:
    """Claim as ``worker`` and check the claim took exactly one job; that job."""
    claimed = claim(store, worker, **kwargs)
    assert len(claimed) == 1, f"expected to claim one job, claimed {len(claimed)}"
    return claimed[0]


def claim_new(
    store: StoreUnderTest, clock: FakeClock, queue: str, *, worker: str = "w1", **fields: Any
) -> JobRecord:
    """Enqueue a fresh job in ``queue`` and claim it from there, checking the claim took it."""
    job_id = enqueue(store, clock, queue=queue, **fields)
    claimed = claim_one(store, worker, queues=(queue,))
    assert claimed.id == job_id
    return claimed


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
    """A succeeded transition of ``job``, finished now."""
    return transition(job, JobState.SUCCEEDED, finished_at=clock.now(), **fields)


def fail(
    job: JobRecord, clock: FakeClock, *, retry_in: timedelta, error: str = "boom", **fields: Any
) -> JobTransition:
    """A failed transition of ``job``, retrying ``retry_in`` from now."""
    return transition(
        job,
        JobState.FAILED,
        failures=job.failures + 1,
        due_at=clock.now() + retry_in,
        error=error,
        **fields,
    )


def die(job: JobRecord, clock: FakeClock, *, error: str = "boom", **fields: Any) -> JobTransition:
    """A dead transition of ``job`` (a final failure), cancelling its continuations."""
    values: dict[str, Any] = {
        "failures": job.failures + 1,
        "finished_at": clock.now(),
        "error": error,
        "cancel_continuations": True,
    }
    values.update(fields)
    return transition(job, JobState.DEAD, **values)


def release(job: JobRecord) -> JobTransition:
    """A release of ``job`` back to its queue."""
    return transition(job, JobState.ENQUEUED)


def give_back(job: JobRecord, **fields: Any) -> JobTransition:
    """A release of ``job`` whose attempt never started: the attempt is given back."""
    return transition(job, JobState.ENQUEUED, unstarted=True, **fields)


def terminal(job: JobRecord, clock: FakeClock, target: JobState) -> JobTransition:
    """The worker's transition of ``job`` to the terminal ``target``, finished now."""
    if target is JobState.SUCCEEDED:
        return succeed(job, clock)
    if target is JobState.DEAD:
        return die(job, clock)
    return transition(job, target, finished_at=clock.now(), error="cancelled by request")


def job_in_state(store: StoreUnderTest, clock: FakeClock, state: JobState, **fields: Any) -> UUID:
    """A job brought to ``state`` through the contract, alone in a queue of its own; its id."""
    queue = f"{state.value}-{new_id(clock)}"
    if state in (JobState.SCHEDULED, JobState.AWAITING):
        parent_id = enqueue(store, clock, queue=f"{queue}-parent")
        return enqueue(
            store,
            clock,
            queue=queue,
            state=state,
            due_at=clock.now() + timedelta(hours=1) if state is JobState.SCHEDULED else None,
            parent_id=parent_id if state is JobState.AWAITING else None,
            **fields,
        )
    job_id = enqueue(store, clock, queue=queue, **fields)
    if state is JobState.ENQUEUED:
        return job_id
    if state is JobState.CANCELLED:
        assert store.jobs.try_cancel(job_id)
        return job_id
    job = claim_one(store, "w1", queues=(queue,))
    if state in (JobState.SUCCEEDED, JobState.DEAD):
        assert store.jobs.apply(terminal(job, clock, state))
    elif state is JobState.FAILED:
        assert store.jobs.apply(fail(job, clock, retry_in=timedelta(hours=1)))
    return job_id


def _found[R](record: R | None, what: str) -> R:
    assert record is not None, f"{what} is missing"
    return record


def stored_job(store: StoreUnderTest, job_id: UUID) -> JobRecord:
    """The stored job ``job_id``; fails when it is missing."""
    return _found(store.jobs.get_job(job_id), f"job {job_id}")


def state_of(store: StoreUnderTest, job_id: UUID) -> JobState:
    """The stored state of job ``job_id``; fails when it is missing."""
    return stored_job(store, job_id).state


def job_details(store: StoreUnderTest, job_id: UUID) -> JobDetails:
    """The monitoring details of job ``job_id``; fails when they are missing."""
    return _found(store.monitoring.get_job_details(job_id), f"the details of job {job_id}")


def stored_instance(store: StoreUnderTest, instance_id: UUID) -> WorkflowInstanceRecord:
    """The stored workflow instance ``instance_id``; fails when it is missing."""
    return _found(store.workflows.get_instance(instance_id), f"instance {instance_id}")


def stored_recurring(store: StoreUnderTest, recurring_id: str) -> RecurringRecord:
    """The stored recurring definition ``recurring_id``; fails when it is missing."""
    return _found(store.jobs.get_recurring(recurring_id), f"recurring definition {recurring_id!r}")


def assert_key_free(store: StoreUnderTest, clock: FakeClock, key: str, old_id: UUID) -> JobRecord:
    """A fresh enqueue with ``key`` stores a new enqueued job, so nothing active holds ``key``."""
    fresh = make_job(clock, queue="reuse", idempotency_key=key)
    assert store.jobs.enqueue([fresh]) == [fresh.id]
    assert fresh.id != old_id
    reused = stored_job(store, fresh.id)
    assert reused.state is JobState.ENQUEUED
    return reused


def make_instance(clock: FakeClock, data: JSON = None, **fields: Any) -> WorkflowInstanceRecord:
    """A fresh running ``order`` v1 instance with data ``{"step": 0}``."""
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


def create_instance(
    store: StoreUnderTest, clock: FakeClock, **fields: Any
) -> WorkflowInstanceRecord:
    """Create one fresh instance and return it as stored."""
    instance = make_instance(clock, **fields)
    store.workflows.create_instance(instance)
    return stored_instance(store, instance.id)


def make_bookmark(clock: FakeClock, instance_id: UUID, **fields: Any) -> BookmarkRecord:
    """A fresh bookmark of ``instance_id`` waiting for signal ``approved`` of ``order-1``."""
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
    """A fresh daily 03:00 definition in queue ``default``, due three hours from now."""
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


def define_recurring(
    store: StoreUnderTest, clock: FakeClock, recurring_id: str = "nightly", **fields: Any
) -> RecurringRecord:
    """Upsert one fresh recurring definition; the record as offered."""
    record = make_recurring(clock, recurring_id, **fields)
    store.jobs.upsert_recurring(record)
    return record


def later(instant: datetime, **delta: float) -> datetime:
    """``instant`` moved on by ``delta`` (``timedelta`` keywords)."""
    return instant + timedelta(**delta)


def as_json(value: Any) -> Any:
    """``value`` as plain JSON data (sequences as lists, mappings as dicts)."""
    return json.loads(json.dumps(value, default=_plain))


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return dict(value)
    return list(value)


def assert_same_invocation(got: Invocation, expected: Invocation) -> None:
    """``got`` calls the same target with the same arguments; JSON compared semantically."""
    assert got.target == expected.target
    assert as_json(got.args) == as_json(expected.args)
    assert as_json(got.kwargs) == as_json(expected.kwargs)


class Identified[K](Protocol):
    """A query's row: anything with an ``id``."""

    @property
    def id(self) -> K: ...


def ids_of[K](page: Page[Identified[K]]) -> list[K]:
    """The ids of ``page``'s items, in order."""
    return [item.id for item in page.items]


def walk_pages[Q, K](query_page: Callable[[Q], Page[Identified[K]]], query: Q) -> list[list[K]]:
    """Every page of ``query`` from the first, as lists of ids; fails past 100 pages."""
    pages: list[list[K]] = []
    cursor: str | None = None
    for _ in range(100):
        page = query_page(with_fields(query, cursor=cursor))
        pages.append(ids_of(page))
        if page.next_cursor is None:
            return pages
        cursor = page.next_cursor
    raise AssertionError("paging did not end within 100 pages")


def job_cursor(store: StoreUnderTest, clock: FakeClock) -> str:
    """A next-page cursor issued by the job query (two jobs are enqueued to get one)."""
    enqueue(store, clock)
    enqueue(store, clock)
    page = store.monitoring.query_jobs(JobQuery(limit=1))
    assert page.next_cursor is not None
    return page.next_cursor


def recurring_cursor(store: StoreUnderTest, clock: FakeClock) -> str:
    """A next-page cursor issued by the recurring query (definitions ``first``, ``second``)."""
    define_recurring(store, clock, "first")
    define_recurring(store, clock, "second")
    page = store.monitoring.query_recurring(RecurringQuery(limit=1))
    assert page.next_cursor is not None
    return page.next_cursor


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
    """A copy of dataclass ``record`` with ``fields`` replaced."""
    return replace(record, **fields)  # type: ignore[type-var]
