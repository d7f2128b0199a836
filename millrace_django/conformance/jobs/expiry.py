"""Expiry: a job's deadline keeps it from starting late, and the sweep ends it."""

from __future__ import annotations

from datetime import timedelta
from functools import partial
from typing import ClassVar

from millrace_django.clock import FakeClock
from millrace_django.conformance.harness import StoreUnderTest
from millrace_django.conformance.suite import FactGroup
from millrace_django.conformance.support import (
    LEASE,
    assert_key_free,
    claim,
    claim_one,
    enqueue,
    fail,
    job_in_state,
    race,
    stored_job,
)
from millrace_django.contract import JobState, TenantFilter, expired_reason


class ExpiryFacts(FactGroup):
    heading: ClassVar[str] = "Expiry"

    def test_a_claim_never_starts_an_enqueued_job_at_or_after_its_deadline(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """An enqueued job is claimable until its deadline; from it on (by the store's
        clock) no claim takes it, and it stays enqueued until the sweep ends it."""
        deadline = clock.now() + timedelta(minutes=1)
        early = enqueue(store, clock, queue="expiring", expires_at=deadline)
        late = enqueue(store, clock, queue="expiring", expires_at=deadline)
        plain = enqueue(store, clock, queue="expiring", priority=-1)

        clock.set(deadline - timedelta(microseconds=1))
        first = claim_one(store, queues=("expiring",))
        assert first.id == early and first.expires_at == deadline
        clock.set(deadline)
        claimed = claim(store, queues=("expiring",), max_count=10)

        assert [job.id for job in claimed] == [plain]
        assert stored_job(store, late).state is JobState.ENQUEUED

    def test_expire_due_cancels_every_unstarted_job_past_its_deadline_with_the_reason(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Scheduled, enqueued, failed (awaiting a retry) and awaiting jobs past their
        deadline end cancelled, finished now, their last error the expiry reason; a paused
        queue's job too (no worker is needed). Jobs with a later deadline or none, running
        jobs and finished ones are untouched."""
        deadline = clock.now() + timedelta(minutes=30)
        doomed = [
            job_in_state(store, clock, state, expires_at=deadline)
            for state in (JobState.SCHEDULED, JobState.ENQUEUED, JobState.FAILED)
        ]
        doomed.append(job_in_state(store, clock, JobState.AWAITING, expires_at=deadline))
        paused = enqueue(store, clock, queue="paused-expiring", expires_at=deadline)
        store.jobs.pause_queue("paused-expiring")
        kept = [
            job_in_state(store, clock, JobState.ENQUEUED, expires_at=deadline + timedelta(1)),
            job_in_state(store, clock, JobState.ENQUEUED),
            job_in_state(store, clock, JobState.PROCESSING, expires_at=deadline),
            job_in_state(store, clock, JobState.SUCCEEDED, expires_at=deadline),
        ]
        before = {job_id: stored_job(store, job_id) for job_id in kept}
        clock.set(deadline + timedelta(seconds=5))

        assert store.jobs.expire_due(clock.now(), 100) == len(doomed) + 1

        for job_id in [*doomed, paused]:
            job = stored_job(store, job_id)
            assert job.state is JobState.CANCELLED
            assert job.finished_at == clock.now()
            assert job.last_error == expired_reason(deadline)
            assert job.worker_id is None and job.lease_until is None
        for job_id, job in before.items():
            assert stored_job(store, job_id) == job
        assert store.jobs.expire_due(clock.now(), 100) == 0

    def test_expired_jobs_are_counted_cancelled_where_they_were_counted_waiting(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """The statistics move an expired job from its waiting state to ``cancelled``
        (in the same atom as the sweep, like any end)."""
        deadline = clock.now() + timedelta(minutes=1)
        for _ in range(3):
            enqueue(store, clock, queue="counted", expires_at=deadline)
        job_in_state(store, clock, JobState.SCHEDULED, expires_at=deadline)
        before = store.monitoring.get_statistics(TenantFilter.any()).jobs_by_state
        clock.set(deadline)

        assert store.jobs.expire_due(clock.now(), 100) == 4

        after = store.monitoring.get_statistics(TenantFilter.any()).jobs_by_state
        assert after[JobState.ENQUEUED] == before[JobState.ENQUEUED] - 3
        assert after[JobState.SCHEDULED] == before[JobState.SCHEDULED] - 1
        assert after[JobState.CANCELLED] == before[JobState.CANCELLED] + 4

    def test_expire_due_takes_at_most_limit_soonest_deadline_first(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """A sweep ends at most ``limit`` jobs, those whose deadline came first."""
        start = clock.now()
        ids = [
            enqueue(store, clock, expires_at=start + timedelta(minutes=minutes))
            for minutes in (3, 1, 2)
        ]
        clock.set(start + timedelta(minutes=5))

        assert store.jobs.expire_due(clock.now(), 2) == 2

        assert [stored_job(store, job_id).state for job_id in ids] == [
            JobState.ENQUEUED,
            JobState.CANCELLED,
            JobState.CANCELLED,
        ]
        assert store.jobs.expire_due(clock.now(), 0) == 0
        assert store.jobs.expire_due(clock.now(), 2) == 1

    def test_an_expired_job_releases_its_key_and_cancels_its_awaiting_continuations(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Like a cancel: the idempotency key is free again and the awaiting closure of
        the expired job is cancelled (it could never succeed)."""
        deadline = clock.now() + timedelta(minutes=1)
        parent = enqueue(store, clock, idempotency_key="report-7", expires_at=deadline)
        child = enqueue(store, clock, state=JobState.AWAITING, parent_id=parent)
        grandchild = enqueue(store, clock, state=JobState.AWAITING, parent_id=child)
        clock.set(deadline)

        assert store.jobs.expire_due(clock.now(), 10) == 1

        for job_id in (child, grandchild):
            job = stored_job(store, job_id)
            assert job.state is JobState.CANCELLED and job.finished_at == clock.now()
        assert_key_free(store, clock, "report-7", parent)

    def test_a_retry_due_after_the_deadline_never_starts(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """The deadline bars every start, retries included: a failed job whose retry
        comes due after it is activated but never claimed, and the sweep ends it."""
        deadline = clock.now() + timedelta(minutes=10)
        job_id = enqueue(store, clock, queue="retrying", expires_at=deadline)
        job = claim_one(store, queues=("retrying",))
        assert store.jobs.apply(fail(job, clock, retry_in=timedelta(minutes=20)))
        clock.advance(timedelta(minutes=20))

        store.jobs.activate_due(clock.now(), 10)
        assert claim(store, queues=("retrying",)) == []
        assert store.jobs.expire_due(clock.now(), 10) == 1

        ended = stored_job(store, job_id)
        assert ended.state is JobState.CANCELLED
        assert ended.failures == 1 and ended.last_error == expired_reason(deadline)

    def test_an_interrupted_attempt_is_reclaimed_after_the_deadline(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """A job that started before its deadline and lost its lease is reclaimed after
        it: the deadline is about starting, and that execution had started."""
        deadline = clock.now() + timedelta(minutes=1)
        job_id = enqueue(store, clock, queue="interrupted", expires_at=deadline)
        claim_one(store, "w1", queues=("interrupted",))
        clock.advance(LEASE + timedelta(minutes=1))

        assert store.jobs.expire_due(clock.now(), 10) == 0
        reclaimed = claim_one(store, "w2", queues=("interrupted",))

        assert reclaimed.id == job_id and reclaimed.attempt == 2

    def test_racing_sweeps_end_each_expired_job_once(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Schedulers sweeping at once end every expired job, each exactly once."""
        racers = self.contention.racers
        deadline = clock.now() + timedelta(minutes=1)
        ids = [enqueue(store, clock, expires_at=deadline) for _ in range(3 * racers)]
        clock.set(deadline)

        ended = race(store, [partial(store.jobs.expire_due, clock.now(), 5)] * racers)
        ended.append(store.jobs.expire_due(clock.now(), 100))

        assert sum(ended) == len(ids)
        assert {stored_job(store, job_id).state for job_id in ids} == {JobState.CANCELLED}
