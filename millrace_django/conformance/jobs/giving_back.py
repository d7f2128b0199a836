"""Giving back an attempt that never started: a release that undoes its claim."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import ClassVar

import pytest

from millrace_django.clock import FakeClock
from millrace_django.conformance.harness import StoreUnderTest
from millrace_django.conformance.suite import FactGroup
from millrace_django.conformance.support import (
    LEASE,
    claim,
    claim_new,
    claim_one,
    enqueue,
    fail,
    give_back,
    job_details,
    make_job,
    release,
    stored_job,
    succeed,
    transition,
)
from millrace_django.contract import (
    TRANSITION_TARGETS,
    AttemptOutcome,
    JobAttempt,
    JobRecord,
    JobState,
    RetryKind,
    RetrySpec,
)
from millrace_django.errors import StorageError

_RETRYING = RetrySpec(kind=RetryKind.FIXED, max_attempts=5, base_delay=timedelta(seconds=1))


def _history(store: StoreUnderTest, job: JobRecord) -> list[tuple[int, AttemptOutcome, str | None]]:
    return [(a.attempt, a.outcome, a.worker_id) for a in job_details(store, job.id).attempts]


def _retried(store: StoreUnderTest, clock: FakeClock, queue: str) -> JobRecord:
    """A job of its own ``queue`` that failed once (error ``flaky``), claimed again."""
    first = claim_new(store, clock, queue, retry=_RETRYING)
    assert store.jobs.apply(fail(first, clock, retry_in=timedelta(0), error="flaky"))
    assert store.jobs.activate_due(clock.now(), 10) == 1
    again = claim_one(store, "w1", queues=(queue,))
    assert (again.attempt, again.failures) == (2, 1)
    return again


class GivingBackFacts(FactGroup):
    heading: ClassVar[str] = "Giving back an attempt that never started"

    def test_giving_back_enqueues_the_job_again_and_the_next_claim_reuses_its_attempt(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """An unstarted release re-enqueues the job at attempt - 1; the next claim reuses it."""
        job_id = enqueue(store, clock, retry=_RETRYING)
        job = claim_one(store, "w1")

        assert store.jobs.apply(give_back(job)) is True

        stored = stored_job(store, job_id)
        assert stored.state is JobState.ENQUEUED
        assert (stored.attempt, stored.failures) == (0, 0)
        assert (stored.worker_id, stored.lease_until) == (None, None)
        assert (stored.due_at, stored.finished_at) == (None, None)
        assert store.jobs.renew_leases("w1", [job_id], LEASE) == set()
        again = claim_one(store, "w2")
        assert (again.id, again.attempt, again.failures) == (job_id, 1, 0)
        assert store.jobs.apply(succeed(job, clock)) is False
        assert stored_job(store, job_id) == again

    def test_giving_back_spends_no_retry_budget_however_often(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Given back again and again, a job keeps its failures, last error and attempt count."""
        job = _retried(store, clock, "again")
        for _ in range(5):
            assert store.jobs.apply(give_back(job))
            stored = stored_job(store, job.id)
            assert (stored.state, stored.attempt, stored.failures) == (JobState.ENQUEUED, 1, 1)
            assert stored.last_error == "flaky"
            job = claim_one(store, "w1", queues=("again",))
            assert (job.attempt, job.failures) == (2, 1)
        assert store.jobs.apply(succeed(job, clock))
        assert _history(store, job) == [(1, AttemptOutcome.FAILED, "w1")]

    def test_a_given_back_attempt_leaves_no_history_and_its_number_records_its_own_end(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """No history row for a give-back; the reused number's later ending is recorded as usual."""
        enqueue(store, clock, retry=_RETRYING)
        claim_one(store, "w1")
        first_reclaimed_at = clock.advance(LEASE + timedelta(seconds=1))
        second = claim_one(store, "w2")  # records attempt 1, interrupted
        assert store.jobs.apply(give_back(second))
        assert _history(store, second) == [(1, AttemptOutcome.INTERRUPTED, "w1")]

        reused = claim_one(store, "w3")
        assert reused.attempt == 2
        reclaimed_at = clock.advance(LEASE + timedelta(seconds=1))
        third = claim_one(store, "w4")  # records attempt 2, interrupted, under w3
        assert third.attempt == 3
        assert store.jobs.apply(give_back(third))
        last = claim_one(store, "w5")
        assert last.attempt == 3
        failed_at = clock.advance(timedelta(seconds=1))
        assert store.jobs.apply(fail(last, clock, retry_in=timedelta(minutes=1), error="kaboom"))

        assert list(job_details(store, last.id).attempts) == [
            JobAttempt(
                attempt=3,
                outcome=AttemptOutcome.FAILED,
                recorded_at=failed_at,
                worker_id="w5",
                error="kaboom",
            ),
            JobAttempt(
                attempt=2,
                outcome=AttemptOutcome.INTERRUPTED,
                recorded_at=reclaimed_at,
                worker_id="w3",
                error=None,
            ),
            JobAttempt(
                attempt=1,
                outcome=AttemptOutcome.INTERRUPTED,
                recorded_at=first_reclaimed_at,
                worker_id="w1",
                error=None,
            ),
        ]

    def test_giving_back_is_fenced_like_any_transition(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """A give-back by another worker or attempt, or a second one, returns False, no changes."""
        job_id = enqueue(store, clock)
        job = claim_one(store, "w1")
        before = stored_job(store, job_id)
        for wrong in (
            give_back(job, expected_worker_id="w2"),
            give_back(job, expected_attempt=job.attempt - 1),
            give_back(job, expected_attempt=job.attempt + 1),
        ):
            assert store.jobs.apply(wrong) is False
        assert stored_job(store, job_id) == before

        assert store.jobs.apply(give_back(job)) is True
        given_back = stored_job(store, job_id)
        assert store.jobs.apply(give_back(job)) is False  # the attempt is given back once
        assert stored_job(store, job_id) == given_back
        assert given_back.attempt == 0

        stale = claim_one(store, "w2")
        clock.advance(LEASE + timedelta(seconds=1))
        owner = claim_one(store, "w3")
        assert store.jobs.apply(give_back(stale)) is False  # its lease was lost
        assert stored_job(store, job_id) == owner
        assert (owner.attempt, owner.worker_id) == (2, "w3")

    def test_a_give_back_stores_what_a_release_stores_but_the_attempt_and_its_history(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """A cancel request, continuations, counters and error survive a give-back as a release."""
        held = {queue: _retried(store, clock, queue) for queue in ("released", "given-back")}
        children = {
            queue: enqueue(store, clock, state=JobState.AWAITING, parent_id=job.id)
            for queue, job in held.items()
        }
        for job in held.values():
            assert store.jobs.try_cancel(job.id)  # flags the held job only

        assert store.jobs.apply(release(held["released"]))
        assert store.jobs.apply(give_back(held["given-back"]))

        released, given = (stored_job(store, job.id) for job in held.values())
        assert (released.attempt, given.attempt) == (2, 1)
        assert given.cancel_requested is True
        assert (
            replace(
                given,
                id=released.id,
                queue=released.queue,
                created_at=released.created_at,
                attempt=released.attempt,
            )
            == released
        )
        for child in children.values():
            assert stored_job(store, child).state is JobState.AWAITING
        assert _history(store, released) == [
            (2, AttemptOutcome.INTERRUPTED, "w1"),
            (1, AttemptOutcome.FAILED, "w1"),
        ]
        assert _history(store, given) == [(1, AttemptOutcome.FAILED, "w1")]
        again = claim_one(store, "w2", queues=("given-back",))
        assert (again.attempt, again.cancel_requested) == (2, True)

    @pytest.mark.parametrize("target", sorted(TRANSITION_TARGETS - {JobState.ENQUEUED}))
    def test_only_a_release_can_give_an_attempt_back(
        self, store: StoreUnderTest, clock: FakeClock, target: JobState
    ) -> None:
        """An unstarted transition to any other target raises StorageError and changes nothing."""
        job_id = enqueue(store, clock)
        job = claim_one(store, "w1")
        before = stored_job(store, job_id)
        wrong = transition(
            job,
            target,
            unstarted=True,
            finished_at=clock.now(),
            due_at=clock.now() + timedelta(minutes=1),
        )
        with pytest.raises(StorageError):
            store.jobs.apply(wrong)
        (outcome,) = store.jobs.apply_many([wrong])
        assert isinstance(outcome, StorageError)
        assert stored_job(store, job_id) == before
        assert list(job_details(store, job_id).attempts) == []
        assert store.jobs.apply(give_back(job)) is True

    def test_apply_many_gives_back_at_its_position_among_other_transitions(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """In a batch, a give-back applies at its position; a stale one there returns False."""
        store.jobs.enqueue([make_job(clock) for _ in range(4)])
        done, given, stale, other = claim(store, "w1", max_count=4)

        outcomes = store.jobs.apply_many(
            [
                succeed(done, clock),
                give_back(given),
                give_back(stale, expected_worker_id="w2"),
                succeed(other, clock),
            ]
        )

        assert outcomes == [True, True, False, True]
        assert stored_job(store, done.id).state is JobState.SUCCEEDED
        assert stored_job(store, other.id).state is JobState.SUCCEEDED
        back = stored_job(store, given.id)
        assert (back.state, back.attempt) == (JobState.ENQUEUED, 0)
        assert stored_job(store, stale.id).state is JobState.PROCESSING
        assert (claim_one(store, "w3").id, stored_job(store, given.id).attempt) == (given.id, 1)
