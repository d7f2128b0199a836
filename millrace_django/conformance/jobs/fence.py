"""The apply fence: only the current (worker, attempt) may move a processing job."""

from __future__ import annotations

from datetime import timedelta
from typing import ClassVar

import pytest

from millrace_django.clock import FakeClock
from millrace_django.conformance.harness import StoreUnderTest
from millrace_django.conformance.suite import FactGroup
from millrace_django.conformance.support import (
    LEASE,
    claim,
    claim_one,
    die,
    enqueue,
    fail,
    job_in_state,
    make_job,
    release,
    stored_job,
    succeed,
)
from millrace_django.contract import JobState
from millrace_django.errors import DuplicateJobId, ParentJobNotFound
from millrace_django.ids import new_id


class FenceFacts(FactGroup):
    heading: ClassVar[str] = "The apply fence"

    def test_apply_with_wrong_worker_is_rejected_without_changes(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """A transition fenced on another worker returns False and changes nothing."""
        enqueue(store, clock)
        job = claim_one(store, "w1")
        before = stored_job(store, job.id)
        follow_up = make_job(clock)

        wrong = succeed(job, clock, expected_worker_id="w2", result={"r": 1}, enqueue=[follow_up])
        assert store.jobs.apply(wrong) is False

        assert stored_job(store, job.id) == before
        assert before.state is JobState.PROCESSING
        assert store.jobs.get_job(follow_up.id) is None

    def test_apply_with_wrong_attempt_is_rejected_without_changes(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """A transition fenced on another attempt (older or newer) returns False, no changes."""
        job_id = enqueue(store, clock)
        job = claim_one(store, "w1")
        before = stored_job(store, job_id)

        for attempt in (job.attempt - 1, job.attempt + 1):
            follow_up = make_job(clock)
            wrong = die(job, clock, expected_attempt=attempt, enqueue=[follow_up])
            assert store.jobs.apply(wrong) is False
            assert store.jobs.get_job(follow_up.id) is None
        assert stored_job(store, job_id) == before

    def test_apply_zombie_versus_new_owner_exactly_one_wins(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """After an expired lease is reclaimed, the old owner's apply loses, the new one's wins."""
        job_id = enqueue(store, clock)
        zombie = claim_one(store, "w1")
        clock.advance(LEASE + timedelta(seconds=1))
        owner = claim_one(store, "w2")

        assert store.jobs.apply(succeed(zombie, clock, result="zombie")) is False
        assert stored_job(store, job_id).worker_id == "w2"
        assert store.jobs.apply(succeed(owner, clock, result="owner")) is True
        assert store.jobs.apply(succeed(zombie, clock, result="zombie")) is False

        stored = stored_job(store, job_id)
        assert stored.state is JobState.SUCCEEDED
        assert stored.result == "owner"
        assert stored.attempt == 2

    def test_apply_succeeded_sets_terminal_fields(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Succeeded stores the transition's finished_at, clears worker/lease, keeps last_error."""
        job_id = enqueue(store, clock)
        first = claim_one(store, "w1")
        assert store.jobs.apply(fail(first, clock, retry_in=timedelta(0), error="first try"))
        assert store.jobs.activate_due(clock.now(), 10) == 1
        second = claim_one(store, "w1")
        clock.advance(timedelta(seconds=30))
        transition = succeed(second, clock)
        clock.advance(timedelta(seconds=10))

        assert store.jobs.apply(transition) is True

        stored = stored_job(store, job_id)
        assert stored.state is JobState.SUCCEEDED
        assert stored.finished_at == transition.finished_at
        assert stored.worker_id is None
        assert stored.lease_until is None
        assert stored.due_at is None
        assert stored.attempt == 2
        assert stored.failures == 1
        assert stored.last_error == "first try"
        assert stored.cancel_requested is False

    def test_run_now_makes_a_retrying_job_claimable_without_spending_retry_budget(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Run now moves a failed job to enqueued, due_at cleared, counters and error kept."""
        job_id = enqueue(store, clock)
        job = claim_one(store, "w1")
        assert store.jobs.apply(fail(job, clock, retry_in=timedelta(hours=1), error="flaky"))

        assert store.jobs.try_run_now(job_id) is True

        stored = stored_job(store, job_id)
        assert stored.state is JobState.ENQUEUED
        assert stored.due_at is None
        assert stored.attempt == 1
        assert stored.failures == 1
        assert stored.last_error == "flaky"
        assert stored.worker_id is None
        assert stored.lease_until is None
        again = claim_one(store, "w2")
        assert again.id == job_id
        assert again.attempt == 2
        assert again.failures == 1

    @pytest.mark.parametrize(
        "state",
        [
            JobState.ENQUEUED,
            JobState.PROCESSING,
            JobState.SUCCEEDED,
            JobState.DEAD,
            JobState.CANCELLED,
            JobState.AWAITING,
        ],
    )
    def test_run_now_refuses_anything_not_waiting_for_its_due_time(
        self, store: StoreUnderTest, clock: FakeClock, state: JobState
    ) -> None:
        """Run now on a job in any state but failed or scheduled returns False and changes
        nothing."""
        job_id = job_in_state(store, clock, state)
        before = stored_job(store, job_id)
        assert before.state is state

        assert store.jobs.try_run_now(job_id) is False
        assert stored_job(store, job_id) == before

    def test_run_now_on_an_unknown_job_reports_false(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Run now on an id that was never stored returns False and creates nothing."""
        unknown = new_id(clock)
        assert store.jobs.try_run_now(unknown) is False
        assert store.jobs.get_job(unknown) is None

    def test_apply_failed_schedules_retry_and_activation_makes_it_claimable(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Failed stores failures, due_at and error, frees the worker; activation at due_at."""
        job_id = enqueue(store, clock)
        job = claim_one(store, "w1")
        due = clock.now() + timedelta(minutes=10)
        assert store.jobs.apply(fail(job, clock, retry_in=timedelta(minutes=10), error="kaput"))

        stored = stored_job(store, job_id)
        assert stored.state is JobState.FAILED
        assert stored.failures == 1
        assert stored.attempt == 1
        assert stored.due_at == due
        assert stored.last_error == "kaput"
        assert stored.worker_id is None
        assert stored.lease_until is None
        assert stored.finished_at is None
        assert claim(store, "w2") == []
        assert store.jobs.activate_due(clock.now(), 10) == 0

        clock.set(due - timedelta(seconds=1))
        assert store.jobs.activate_due(clock.now(), 10) == 0
        clock.set(due)
        assert store.jobs.activate_due(clock.now(), 10) == 1
        activated = stored_job(store, job_id)
        assert activated.state is JobState.ENQUEUED
        assert activated.due_at is None
        again = claim_one(store, "w2")
        assert again.id == job_id
        assert again.attempt == 2
        assert again.failures == 1
        assert again.last_error == "kaput"

    def test_apply_release_returns_job_to_queue_without_consuming_retry_budget(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """A release re-enqueues the job, failures unchanged; the released attempt is fenced off."""
        job_id = enqueue(store, clock)
        job = claim_one(store, "w1")

        assert store.jobs.apply(release(job)) is True

        stored = stored_job(store, job_id)
        assert stored.state is JobState.ENQUEUED
        assert stored.failures == 0
        assert stored.attempt == 1
        assert stored.worker_id is None
        assert stored.lease_until is None
        assert stored.due_at is None
        assert stored.finished_at is None
        again = claim_one(store, "w1")
        assert again.attempt == 2
        assert again.failures == 0
        assert store.jobs.apply(succeed(job, clock)) is False
        assert stored_job(store, job_id) == again

    def test_apply_is_all_or_nothing_when_an_enqueue_insert_fails(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """An insert that raises (missing parent, duplicate id) rolls back the whole transition."""
        job_id = enqueue(store, clock)
        bystander_id = enqueue(store, clock, queue="other")
        job = claim_one(store, "w1")
        before = stored_job(store, job_id)

        good = make_job(clock)
        orphan = make_job(clock, state=JobState.AWAITING, parent_id=new_id(clock))
        with pytest.raises(ParentJobNotFound):
            store.jobs.apply(succeed(job, clock, result=1, enqueue=[good, orphan]))
        assert stored_job(store, job_id) == before
        assert store.jobs.get_job(good.id) is None
        assert store.jobs.get_job(orphan.id) is None

        clash = make_job(clock, id=bystander_id, queue="clash")
        with pytest.raises(DuplicateJobId):
            store.jobs.apply(die(job, clock, enqueue=[good, clash]))
        assert stored_job(store, job_id) == before
        assert store.jobs.get_job(good.id) is None
        assert stored_job(store, bystander_id).queue == "other"

        assert store.jobs.apply(succeed(job, clock)) is True

    def test_apply_enqueue_inserts_commit_atomically_with_the_transition(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """A transition's inserts are stored with it, as given, in the same commit."""
        job_id = enqueue(store, clock)
        job = claim_one(store, "w1")
        follow_up = make_job(clock, priority=4, queue="next")
        later = make_job(clock, state=JobState.SCHEDULED, due_at=clock.now() + timedelta(hours=1))

        assert store.jobs.apply(succeed(job, clock, enqueue=[follow_up, later])) is True

        assert stored_job(store, job_id).state is JobState.SUCCEEDED
        stored_follow_up = stored_job(store, follow_up.id)
        assert stored_follow_up.state is JobState.ENQUEUED
        assert stored_follow_up.queue == "next"
        assert stored_follow_up.priority == 4
        assert stored_follow_up.attempt == 0
        stored_later = stored_job(store, later.id)
        assert stored_later.state is JobState.SCHEDULED
        assert stored_later.due_at == later.due_at
        assert claim_one(store, "w2", queues=("next", "default")).id == follow_up.id
