"""Due activation: the scheduler's move of due scheduled and failed jobs to the queue."""

from __future__ import annotations

from datetime import datetime, timedelta
from functools import partial
from typing import ClassVar
from uuid import UUID

from millrace_django.clock import FakeClock
from millrace_django.conformance.harness import StoreUnderTest
from millrace_django.conformance.suite import FactGroup
from millrace_django.conformance.support import (
    claim_one,
    enqueue,
    fail,
    make_job,
    race,
    stored_job,
)
from millrace_django.contract import JobState
from millrace_django.ids import new_id

DUE_JOBS = 50
ACTIVATION_BATCH = 3


def _assert_activated(store: StoreUnderTest, job_id: UUID) -> None:
    job = stored_job(store, job_id)
    assert job.state is JobState.ENQUEUED, f"job {job_id} is {job.state}, not enqueued"
    assert job.due_at is None


def _assert_waiting(store: StoreUnderTest, job_id: UUID, state: JobState, due: datetime) -> None:
    job = stored_job(store, job_id)
    assert job.state is state, f"job {job_id} is {job.state}, not {state}"
    assert job.due_at == due


def _activate_until_empty(store: StoreUnderTest, now: datetime) -> list[int]:
    counts: list[int] = []
    while count := store.jobs.activate_due(now, ACTIVATION_BATCH):
        assert 0 < count <= ACTIVATION_BATCH, f"activated {count} with a limit of 3"
        counts.append(count)
    return counts


class ActivationFacts(FactGroup):
    heading: ClassVar[str] = "Due activation"

    def test_activate_moves_only_due_jobs_oldest_first_respecting_batch_size(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Activation enqueues due scheduled/failed jobs, oldest due first, at most limit."""
        start = clock.now()
        due_30 = start + timedelta(minutes=30)
        due_10 = start + timedelta(minutes=10)
        due_15 = start + timedelta(minutes=15)
        due_2h = start + timedelta(hours=2)
        in_30 = enqueue(store, clock, state=JobState.SCHEDULED, due_at=due_30)
        in_10 = enqueue(store, clock, state=JobState.SCHEDULED, due_at=due_10)
        retrying = enqueue(store, clock)
        assert store.jobs.apply(fail(claim_one(store, "w1"), clock, retry_in=due_15 - start))
        future = enqueue(store, clock, state=JobState.SCHEDULED, due_at=due_2h)
        clock.advance(timedelta(hours=1))

        assert store.jobs.activate_due(clock.now(), 2) == 2
        _assert_activated(store, in_10)
        _assert_activated(store, retrying)
        _assert_waiting(store, in_30, JobState.SCHEDULED, due_30)
        _assert_waiting(store, future, JobState.SCHEDULED, due_2h)

        assert store.jobs.activate_due(clock.now(), 10) == 1
        _assert_activated(store, in_30)
        _assert_waiting(store, future, JobState.SCHEDULED, due_2h)
        assert store.jobs.activate_due(clock.now(), 10) == 0
        _assert_waiting(store, future, JobState.SCHEDULED, due_2h)

    def test_concurrent_activation_activates_each_job_exactly_once(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Activators racing over 50 due jobs report 50 activations in total, none twice."""
        racers = self.contention.racers
        due = clock.now() + timedelta(minutes=1)
        records = [make_job(clock, state=JobState.SCHEDULED, due_at=due) for _ in range(DUE_JOBS)]
        ids = store.jobs.enqueue(records)
        clock.set(due)

        per_racer = race(store, [partial(_activate_until_empty, store, due)] * racers)

        assert sum(sum(counts) for counts in per_racer) == DUE_JOBS
        assert store.jobs.activate_due(clock.now(), DUE_JOBS) == 0
        for job_id in ids:
            _assert_activated(store, job_id)

    def test_activation_breaks_due_time_ties_by_enqueue_order(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Jobs due at the same instant activate in insertion order, not id or created_at."""
        due = clock.now() + timedelta(minutes=5)
        stamps: list[tuple[UUID, datetime]] = []
        for _ in range(3):
            stamps.append((new_id(clock), clock.now()))
            clock.advance(timedelta(seconds=1))
        first, second, third = (
            make_job(clock, id=job_id, created_at=created, state=JobState.SCHEDULED, due_at=due)
            for job_id, created in reversed(stamps)
        )
        for record in (first, second, third):
            store.jobs.enqueue([record])
        clock.set(due)

        assert store.jobs.activate_due(clock.now(), 2) == 2
        _assert_activated(store, first.id)
        _assert_activated(store, second.id)
        _assert_waiting(store, third.id, JobState.SCHEDULED, due)
