"""The next due time: what a scheduler sleeps until instead of polling."""

from __future__ import annotations

from datetime import timedelta
from typing import ClassVar

from millrace_django.clock import FakeClock
from millrace_django.conformance.harness import StoreUnderTest
from millrace_django.conformance.suite import FactGroup
from millrace_django.conformance.support import (
    claim_one,
    define_recurring,
    enqueue,
    fail,
    make_job,
)
from millrace_django.contract import FireOutcome, JobState


class NextDueFacts(FactGroup):
    heading: ClassVar[str] = "Next due time"

    def test_next_due_time_is_the_earliest_waiting_job_or_fire_strictly_after_the_instant(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """The least due_at (scheduled, failed) or next_fire_time later than `after`; else None."""
        start = clock.now()
        assert store.jobs.next_due_time(start) is None
        enqueue(store, clock)
        assert store.jobs.next_due_time(start) is None  # enqueued: nothing to wait for
        assert store.jobs.apply(fail(claim_one(store, "w1"), clock, retry_in=timedelta(minutes=10)))
        retry_due = start + timedelta(minutes=10)
        fire_due = start + timedelta(minutes=20, microseconds=1)
        job_due = start + timedelta(minutes=30)
        define_recurring(store, clock, "every-twenty", next_fire_time=fire_due)
        enqueue(store, clock, state=JobState.SCHEDULED, due_at=job_due)
        define_recurring(store, clock, "overdue", next_fire_time=start - timedelta(hours=1))

        assert store.jobs.next_due_time(start) == retry_due
        assert store.jobs.next_due_time(retry_due - timedelta(microseconds=1)) == retry_due
        assert store.jobs.next_due_time(retry_due) == fire_due
        assert store.jobs.next_due_time(fire_due - timedelta(microseconds=1)) == fire_due
        assert store.jobs.next_due_time(fire_due) == job_due
        assert store.jobs.next_due_time(job_due) is None
        assert store.jobs.next_due_time(start - timedelta(days=1)) == start - timedelta(hours=1)

    def test_next_due_time_follows_activation_fires_cancellation_and_removal(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Activated or cancelled jobs and removed definitions stop counting; a fire moves it on."""
        start = clock.now()
        enqueue(store, clock, state=JobState.SCHEDULED, due_at=start + timedelta(minutes=1))
        cancelled = enqueue(
            store, clock, state=JobState.SCHEDULED, due_at=start + timedelta(minutes=2)
        )
        definition = define_recurring(
            store, clock, "hourly", next_fire_time=start + timedelta(minutes=3)
        )
        removed = define_recurring(
            store, clock, "removed", next_fire_time=start + timedelta(minutes=4)
        )
        assert store.jobs.next_due_time(start) == start + timedelta(minutes=1)

        clock.advance(timedelta(minutes=1))
        assert store.jobs.activate_due(clock.now(), 10) == 1
        assert store.jobs.next_due_time(start) == start + timedelta(minutes=2)
        assert store.jobs.try_cancel(cancelled)
        assert store.jobs.next_due_time(start) == start + timedelta(minutes=3)
        following = start + timedelta(hours=1)
        fired = make_job(clock, recurring_id=definition.id)
        assert (
            store.jobs.try_fire_recurring(
                definition.id, definition.next_fire_time, following, fired
            )
            is FireOutcome.FIRED
        )
        assert store.jobs.next_due_time(start) == removed.next_fire_time
        assert store.jobs.remove_recurring(removed.id)
        assert store.jobs.next_due_time(start) == following
