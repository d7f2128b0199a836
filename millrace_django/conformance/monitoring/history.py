"""Attempt history: one row per execution that ended badly, newest first, capped."""

from __future__ import annotations

from datetime import timedelta
from uuid import UUID

from millrace_django.clock import FakeClock
from millrace_django.conformance.harness import StoreUnderTest
from millrace_django.conformance.suite import FactGroup
from millrace_django.conformance.support import (
    LEASE,
    claim_new,
    claim_one,
    die,
    enqueue,
    fail,
    give_back,
    job_details,
    release,
    succeed,
    transition,
)
from millrace_django.contract import (
    ATTEMPT_HISTORY_CAP,
    AttemptOutcome,
    JobAttempt,
    JobQuery,
    JobRecord,
    JobState,
    RetryKind,
    RetrySpec,
)

_RETRYING = RetrySpec(kind=RetryKind.FIXED, max_attempts=50, base_delay=timedelta(seconds=1))


def _history(store: StoreUnderTest, job_id: UUID) -> list[JobAttempt]:
    return list(job_details(store, job_id).attempts)


class AttemptHistoryFacts(FactGroup):
    heading = "Attempt history"

    def test_a_job_that_succeeds_first_time_records_no_attempt_history(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """A job that succeeds first time records no attempt history."""
        job_id = enqueue(store, clock, retry=_RETRYING)
        job = claim_one(store)
        assert _history(store, job_id) == []
        clock.advance(timedelta(seconds=3))
        assert store.jobs.apply(succeed(job, clock))
        assert _history(store, job_id) == []

    def test_a_failed_attempt_is_recorded_with_its_error_and_worker(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """A failed attempt is recorded with its error and worker."""
        job_id = enqueue(store, clock, retry=_RETRYING)
        job = claim_one(store, "w7")
        ended = clock.advance(timedelta(seconds=3))
        assert store.jobs.apply(fail(job, clock, retry_in=timedelta(minutes=1), error="kaboom"))
        assert _history(store, job_id) == [
            JobAttempt(
                attempt=1,
                outcome=AttemptOutcome.FAILED,
                recorded_at=ended,
                worker_id="w7",
                error="kaboom",
            )
        ]
        details = job_details(store, job_id)
        assert (details.summary.failures, details.last_error) == (1, "kaboom")

    def test_an_expired_lease_records_an_interruption_rather_than_a_failure(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """An expired lease records an interruption (at reclaim) rather than a failure."""
        job_id = enqueue(store, clock, retry=_RETRYING)
        claim_one(store, "w1")
        clock.advance(LEASE + timedelta(seconds=1))
        assert _history(store, job_id) == [], "nothing is recorded until the job is reclaimed"
        reclaimed_at = clock.advance(timedelta(seconds=1))
        claim_one(store, "w2")
        details = job_details(store, job_id)
        assert list(details.attempts) == [
            JobAttempt(
                attempt=1,
                outcome=AttemptOutcome.INTERRUPTED,
                recorded_at=reclaimed_at,
                worker_id="w1",
                error=None,
            )
        ]
        assert (details.summary.attempt, details.summary.failures) == (2, 0)
        assert details.summary.interruptions == 1, "the reclaimed attempt; not the one running"

    def test_a_fenced_release_records_an_interruption(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """A fenced release records an interruption; a rejected one records nothing."""
        job_id = enqueue(store, clock, retry=_RETRYING)
        job = claim_one(store, "w1")
        released_at = clock.advance(timedelta(seconds=2))
        assert not store.jobs.apply(transition(job, JobState.ENQUEUED, expected_worker_id="w0"))
        assert _history(store, job_id) == []
        assert store.jobs.apply(release(job))
        assert _history(store, job_id) == [
            JobAttempt(
                attempt=1,
                outcome=AttemptOutcome.INTERRUPTED,
                recorded_at=released_at,
                worker_id="w1",
                error=None,
            )
        ]
        assert job_details(store, job_id).summary.failures == 0

    def test_attempt_history_is_newest_first_and_capped_without_distorting_the_counters(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Attempt history is newest first and capped without distorting the counters."""
        job_id = enqueue(store, clock, retry=_RETRYING)
        total = ATTEMPT_HISTORY_CAP + 5
        for n in range(1, total + 1):
            job = claim_one(store, f"w{n}")
            clock.advance(timedelta(seconds=1))
            assert store.jobs.apply(
                fail(job, clock, retry_in=timedelta(seconds=1), error=f"failure {n}")
            )
            clock.advance(timedelta(seconds=1))
            assert store.jobs.activate_due(clock.now(), 10) == 1
        details = job_details(store, job_id)
        kept = range(total, total - ATTEMPT_HISTORY_CAP, -1)
        assert [(a.attempt, a.error, a.worker_id) for a in details.attempts] == [
            (n, f"failure {n}", f"w{n}") for n in kept
        ]
        assert {a.outcome for a in details.attempts} == {AttemptOutcome.FAILED}
        recorded = [a.recorded_at for a in details.attempts]
        assert recorded == sorted(recorded, reverse=True)
        summary = details.summary
        assert (summary.attempt, summary.failures, summary.interruptions) == (total, total, 0)

    def test_a_final_failure_is_recorded_but_a_poison_pill_or_cancellation_is_not(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """A final failure is recorded, but a poison-pill verdict or a cancellation is not."""
        dead_id = enqueue(store, clock)
        job = claim_one(store, "w1")
        ended = clock.advance(timedelta(seconds=1))
        assert store.jobs.apply(die(job, clock, error="gave up"))
        assert _history(store, dead_id) == [
            JobAttempt(
                attempt=1,
                outcome=AttemptOutcome.FAILED,
                recorded_at=ended,
                worker_id="w1",
                error="gave up",
            )
        ]
        poisoned_id = enqueue(store, clock, queue="poison")
        job = claim_one(store, "w1", queues=["poison"])
        verdict = transition(job, JobState.DEAD, finished_at=clock.now(), error="poison pill")
        assert store.jobs.apply(verdict)
        assert _history(store, poisoned_id) == []
        cancelled_id = enqueue(store, clock, queue="cancel")
        job = claim_one(store, "w1", queues=["cancel"])
        assert store.jobs.try_cancel(cancelled_id)
        assert store.jobs.apply(transition(job, JobState.CANCELLED, finished_at=clock.now()))
        assert _history(store, cancelled_id) == []

    def test_interruptions_count_only_the_attempts_that_ended_without_an_outcome(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Interruptions count only the attempts that ended without an outcome (a lost
        lease, a crash, a release): never the one running, a success, a failure, a cancel
        or a poison-pill verdict, in the list as in the details."""
        counts: dict[UUID, tuple[int, int, int]] = {}  # (attempt, failures, interruptions)

        def fresh(queue: str) -> JobRecord:
            return claim_new(store, clock, queue, retry=_RETRYING)

        def after_a_release(queue: str) -> JobRecord:
            assert store.jobs.apply(release(fresh(queue)))
            return claim_one(store, "w2", queues=[queue])

        counts[enqueue(store, clock, queue="never-claimed")] = (0, 0, 0)
        counts[fresh("running").id] = (1, 0, 0)
        done = fresh("done")
        assert store.jobs.apply(succeed(done, clock))
        counts[done.id] = (1, 0, 0)
        retried = after_a_release("retried")
        assert store.jobs.apply(succeed(retried, clock))
        counts[retried.id] = (2, 0, 1)
        counts[after_a_release("running-again").id] = (2, 0, 1)
        failed = fresh("failed")
        assert store.jobs.apply(fail(failed, clock, retry_in=timedelta(hours=1)))
        counts[failed.id] = (1, 1, 0)
        dead = after_a_release("dead")
        assert store.jobs.apply(die(dead, clock))
        counts[dead.id] = (2, 1, 1)
        poisoned = after_a_release("poisoned")
        verdict = transition(poisoned, JobState.DEAD, finished_at=clock.now(), error="poison")
        assert store.jobs.apply(verdict)
        counts[poisoned.id] = (2, 0, 1)
        stopped = fresh("stopped")
        assert store.jobs.try_cancel(stopped.id)
        assert store.jobs.apply(transition(stopped, JobState.CANCELLED, finished_at=clock.now()))
        counts[stopped.id] = (1, 0, 0)
        withdrawn = fresh("withdrawn")
        assert store.jobs.apply(release(withdrawn))
        assert store.jobs.try_cancel(withdrawn.id)
        counts[withdrawn.id] = (1, 0, 1)
        unstarted = after_a_release("given-back")
        assert store.jobs.apply(give_back(unstarted))
        counts[unstarted.id] = (1, 0, 1)
        lapsed = fresh("lapsed")
        clock.advance(LEASE + timedelta(seconds=1))
        assert claim_one(store, "w2", queues=["lapsed"]).id == lapsed.id
        counts[lapsed.id] = (2, 0, 1)
        for job_id, expected in counts.items():
            summary = job_details(store, job_id).summary
            listed = store.monitoring.query_jobs(JobQuery(queue=summary.queue)).items
            assert list(listed) == [summary]
            got = (summary.attempt, summary.failures, summary.interruptions)
            assert got == expected, f"{summary.queue} ({summary.state.value})"
