"""Claims and leases: who may take a job, for how long, and in which order."""

from __future__ import annotations

from datetime import datetime, timedelta
from functools import partial
from typing import ClassVar
from uuid import UUID

from millrace_django.clock import FakeClock
from millrace_django.conformance.harness import StoreUnderTest
from millrace_django.conformance.suite import FactGroup
from millrace_django.conformance.support import (
    LEASE,
    claim,
    claim_one,
    enqueue,
    fail,
    make_job,
    race,
    state_of,
    stored_job,
)
from millrace_django.contract import JobRecord, JobState
from millrace_django.ids import new_id

CONTENDED_JOBS = 100
CLAIM_BATCH = 5


def _claim_until_empty(store: StoreUnderTest, worker: str) -> list[JobRecord]:
    """Claim in batches until a claim comes back empty; everything this worker got."""
    taken: list[JobRecord] = []
    while batch := claim(store, worker, max_count=CLAIM_BATCH):
        assert len(batch) <= CLAIM_BATCH, f"a claim of {CLAIM_BATCH} returned {len(batch)}"
        taken.extend(batch)
    return taken


class ClaimFacts(FactGroup):
    heading: ClassVar[str] = "Claims and leases"

    def test_claim_is_exclusive_under_contention(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Racing claimers never share a job: 100 jobs, exactly 100 distinct claims."""
        racers = self.contention.racers
        ids = store.jobs.enqueue([make_job(clock) for _ in range(CONTENDED_JOBS)])
        workers = [f"w{n}" for n in range(racers)]
        per_worker = race(store, [partial(_claim_until_empty, store, w) for w in workers])

        claimed = [job.id for taken in per_worker for job in taken]
        assert len(claimed) == CONTENDED_JOBS, f"{len(claimed)} claims for {CONTENDED_JOBS} jobs"
        assert len(set(claimed)) == CONTENDED_JOBS, "a job was claimed more than once"
        assert set(claimed) == set(ids)
        assert claim(store, "late", max_count=CONTENDED_JOBS) == []
        for worker, taken in zip(workers, per_worker, strict=True):
            for job in taken:
                stored = stored_job(store, job.id)
                assert stored.state is JobState.PROCESSING
                assert stored.worker_id == worker == job.worker_id
                assert stored.attempt == 1 == job.attempt

    def test_claim_sets_processing_worker_lease_and_increments_attempt(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """A claim sets processing, the worker, lease_until = clock now + lease, attempt 1."""
        record = make_job(clock, priority=3)
        store.jobs.enqueue([record])
        clock.advance(timedelta(hours=7, minutes=13, seconds=29))
        lease = timedelta(minutes=2, seconds=41)
        job = claim_one(store, "w1", lease=lease)
        stored = stored_job(store, record.id)

        for seen in (job, stored):
            assert seen.id == record.id
            assert seen.state is JobState.PROCESSING
            assert seen.worker_id == "w1"
            assert seen.lease_until == clock.now() + lease
            assert seen.attempt == 1
            assert seen.failures == 0
            assert seen.cancel_requested is False
            assert seen.queue == record.queue
            assert seen.priority == 3
            assert seen.created_at == record.created_at
            assert seen.due_at is None
            assert seen.finished_at is None
            assert seen.last_error is None
        assert job == stored

    def test_claim_returns_at_most_max_count(self, store: StoreUnderTest, clock: FakeClock) -> None:
        """An uncontended claim returns min(max_count, claimable) distinct jobs, never more."""
        ids = store.jobs.enqueue([make_job(clock) for _ in range(5)])

        first = claim(store, "w1", max_count=3)
        assert len(first) == 3
        second = claim(store, "w2", max_count=10)
        assert len(second) == 2
        assert claim(store, "w3", max_count=10) == []

        taken = [job.id for job in first + second]
        assert len(set(taken)) == 5
        assert set(taken) == set(ids)
        assert {job.worker_id for job in first} == {"w1"}
        assert {job.worker_id for job in second} == {"w2"}

    def test_claim_only_returns_requested_queues(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """A claim takes jobs from the requested queues only; others stay enqueued."""
        in_a = enqueue(store, clock, queue="a")
        in_b = enqueue(store, clock, queue="b")
        in_c = enqueue(store, clock, queue="c")

        taken = claim(store, "w1", queues=("a", "c"), max_count=10)

        assert {job.id for job in taken} == {in_a, in_c}
        assert {job.queue for job in taken} == {"a", "c"}
        left = stored_job(store, in_b)
        assert left.state is JobState.ENQUEUED
        assert left.worker_id is None
        assert left.lease_until is None
        assert left.attempt == 0
        assert claim(store, "w2", queues=("a", "c", "d"), max_count=10) == []

    def test_unexpired_lease_blocks_reclaim(self, store: StoreUnderTest, clock: FakeClock) -> None:
        """A processing job whose lease has not expired cannot be claimed by anyone."""
        job_id = enqueue(store, clock)
        job = claim_one(store, "w1")
        clock.advance(LEASE - timedelta(seconds=1))

        assert claim(store, "w2", max_count=10) == []
        assert claim(store, "w1", max_count=10) == []
        stored = stored_job(store, job_id)
        assert stored.state is JobState.PROCESSING
        assert stored.worker_id == "w1"
        assert stored.attempt == 1
        assert stored.lease_until == job.lease_until

    def test_expired_lease_is_reclaimable_and_increments_attempt(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """At now >= lease_until another worker reclaims the job: attempt 2, failures 0."""
        job_id = enqueue(store, clock)
        first = claim_one(store, "w1")
        assert first.lease_until is not None
        clock.set(first.lease_until)

        again = claim_one(store, "w2")
        stored = stored_job(store, job_id)
        for seen in (again, stored):
            assert seen.id == job_id
            assert seen.state is JobState.PROCESSING
            assert seen.worker_id == "w2"
            assert seen.attempt == 2
            assert seen.failures == 0
            assert seen.lease_until == clock.now() + LEASE

    def test_claim_order_is_priority_desc_then_fifo_across_queue_union(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Claims go by priority desc, then insertion order (not id/created_at) over all queues."""
        # Ids and creation times run opposite to insertion order, so only an insertion
        # sequence orders the ties correctly.
        stamps: list[tuple[UUID, datetime]] = []
        for _ in range(4):
            stamps.append((new_id(clock), clock.now()))
            clock.advance(timedelta(seconds=1))
        (id1, t1), (id2, t2), (id3, t3), (id4, t4) = stamps
        low_a = make_job(clock, id=id4, created_at=t4, queue="a", priority=-1)
        high_b = make_job(clock, id=id3, created_at=t3, queue="b", priority=5)
        low_b = make_job(clock, id=id2, created_at=t2, queue="b", priority=-1)
        high_a = make_job(clock, id=id1, created_at=t1, queue="a", priority=5)
        for record in (low_a, high_b, low_b, high_a):
            store.jobs.enqueue([record])

        order = [claim_one(store, "w1", queues=("a", "b")).id for _ in range(4)]

        assert order == [high_b.id, high_a.id, low_a.id, low_b.id]
        assert claim(store, "w1", queues=("a", "b")) == []

    def test_scheduled_failed_and_awaiting_jobs_are_never_claimable_directly(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Scheduled, failed and awaiting jobs are never claimed, however overdue."""
        failing_id = enqueue(store, clock)
        failing = claim_one(store, "w1")
        assert store.jobs.apply(fail(failing, clock, retry_in=timedelta(minutes=1)))
        parent_id = enqueue(store, clock)
        assert claim_one(store, "w1").id == parent_id
        child_id = enqueue(store, clock, state=JobState.AWAITING, parent_id=parent_id)
        scheduled_id = enqueue(
            store, clock, state=JobState.SCHEDULED, due_at=clock.now() - timedelta(hours=1)
        )
        clock.advance(timedelta(minutes=2))

        assert claim(store, "w2", max_count=10) == []
        assert state_of(store, failing_id) is JobState.FAILED
        assert state_of(store, child_id) is JobState.AWAITING
        assert state_of(store, scheduled_id) is JobState.SCHEDULED
        for job_id in (failing_id, child_id, scheduled_id):
            stored = stored_job(store, job_id)
            assert stored.worker_id is None
            assert stored.lease_until is None
