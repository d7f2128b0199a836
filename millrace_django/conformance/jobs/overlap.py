"""Recurring overlap: what a fire does while the job of the previous fire is active."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from functools import partial
from typing import ClassVar

from millrace_django.clock import FakeClock
from millrace_django.conformance.harness import StoreUnderTest
from millrace_django.conformance.suite import FactGroup
from millrace_django.conformance.support import (
    claim_one,
    define_recurring,
    make_job,
    race,
    stored_job,
    stored_recurring,
    succeed,
)
from millrace_django.contract import (
    TERMINAL_JOB_STATES,
    FireOutcome,
    JobRecord,
    JobState,
    OverlapPolicy,
    RecurringRecord,
)


def _fire(
    store: StoreUnderTest, clock: FakeClock, recurring_id: str
) -> tuple[FireOutcome, JobRecord]:
    """Fire the stored definition's pending occurrence, the next one a day later; what
    the store answered and the job offered."""
    stored = stored_recurring(store, recurring_id)
    job = make_job(clock, queue=f"overlap-{recurring_id}", recurring_id=recurring_id)
    following = stored.next_fire_time + timedelta(days=1)
    return store.jobs.try_fire_recurring(recurring_id, stored.next_fire_time, following, job), job


def _fired_once(store: StoreUnderTest, clock: FakeClock, overlap: OverlapPolicy) -> RecurringRecord:
    """A definition with ``overlap`` whose first fire inserted a job, still enqueued."""
    definition = define_recurring(store, clock, f"overlap-{overlap.value}", overlap=overlap)
    outcome, job = _fire(store, clock, definition.id)
    assert outcome is FireOutcome.FIRED
    stored = stored_recurring(store, definition.id)
    assert stored.fired_job_id == job.id and stored.overlap is overlap
    return stored


def _racing_fires(
    store: StoreUnderTest, clock: FakeClock, stored: RecurringRecord, count: int
) -> tuple[list[JobRecord], list[Callable[[], FireOutcome]]]:
    """``count`` fires of ``stored``'s pending occurrence, each offering a job of its own:
    the jobs, and the fires to race."""
    jobs = [
        make_job(clock, queue=f"overlap-{stored.id}", recurring_id=stored.id) for _ in range(count)
    ]
    following = stored.next_fire_time + timedelta(days=1)
    fire = partial(store.jobs.try_fire_recurring, stored.id, stored.next_fire_time, following)
    return jobs, [partial(fire, job) for job in jobs]


def _previous(store: StoreUnderTest, record: RecurringRecord) -> JobRecord:
    """The job of ``record``'s last fire."""
    assert record.fired_job_id is not None, f"{record.id} has not fired"
    return stored_job(store, record.fired_job_id)


class OverlapFacts(FactGroup):
    heading: ClassVar[str] = "Recurring overlap"

    def test_allow_fires_while_the_previous_job_is_still_active(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """``allow`` (the default) fires every occurrence, side by side with the last."""
        first = _fired_once(store, clock, OverlapPolicy.ALLOW)

        outcome, job = _fire(store, clock, first.id)

        assert outcome is FireOutcome.FIRED
        assert stored_job(store, job.id).state is JobState.ENQUEUED
        assert _previous(store, first).state is JobState.ENQUEUED
        assert stored_recurring(store, first.id).fired_job_id == job.id

    def test_skip_drops_the_occurrence_while_the_previous_job_is_active_and_records_it(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """``skip`` with the previous job active: the schedule moves on, nothing is
        inserted, ``last_skip_time`` is the dropped occurrence; the last fire is kept."""
        first = _fired_once(store, clock, OverlapPolicy.SKIP)

        outcome, job = _fire(store, clock, first.id)

        assert outcome is FireOutcome.SKIPPED
        assert store.jobs.get_job(job.id) is None
        stored = stored_recurring(store, first.id)
        assert stored.next_fire_time == first.next_fire_time + timedelta(days=1)
        assert stored.last_skip_time == first.next_fire_time
        assert stored.last_fire_time == first.last_fire_time
        assert stored.fired_job_id == first.fired_job_id

    def test_skip_and_queue_fire_again_once_the_previous_job_has_ended(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Whatever way the previous job ended (succeeded here), the next occurrence fires."""
        for overlap in (OverlapPolicy.SKIP, OverlapPolicy.QUEUE):
            first = _fired_once(store, clock, overlap)
            running = claim_one(store, queues=(f"overlap-{first.id}",))
            assert store.jobs.apply(succeed(running, clock))

            outcome, job = _fire(store, clock, first.id)

            assert outcome is FireOutcome.FIRED, overlap
            assert stored_recurring(store, first.id).fired_job_id == job.id

    def test_queue_holds_the_occurrence_until_the_previous_job_ends(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """``queue`` with the previous job active (running here): the fire changes
        nothing and the due read leaves the definition out, so held definitions never
        crowd out due ones; once that job ends it is due again and fires."""
        held = _fired_once(store, clock, OverlapPolicy.QUEUE)
        other = define_recurring(store, clock, "overlap-other", overlap=OverlapPolicy.SKIP)
        running = claim_one(store, queues=(f"overlap-{held.id}",))
        clock.set(max(held.next_fire_time, other.next_fire_time))

        outcome, job = _fire(store, clock, held.id)

        assert outcome is FireOutcome.HELD
        assert store.jobs.get_job(job.id) is None
        assert stored_recurring(store, held.id) == held
        assert [r.id for r in store.jobs.get_due_recurring(clock.now(), 10)] == [other.id]
        assert store.jobs.try_cancel(running.id)  # only flags the running job
        assert store.jobs.get_due_recurring(clock.now(), 1)[0].id == other.id
        assert store.jobs.apply(succeed(running, clock))
        assert held.id in [r.id for r in store.jobs.get_due_recurring(clock.now(), 10)]
        assert _fire(store, clock, held.id)[0] is FireOutcome.FIRED

    def test_an_upsert_keeps_the_last_fired_job_and_skip_and_overwrites_the_policy(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """A redeploy's upsert changes the policy but not what the store tracks."""
        first = _fired_once(store, clock, OverlapPolicy.SKIP)
        assert _fire(store, clock, first.id)[0] is FireOutcome.SKIPPED
        skipped = stored_recurring(store, first.id)

        store.jobs.upsert_recurring(
            define_recurring(store, clock, first.id, overlap=OverlapPolicy.QUEUE)
        )

        stored = stored_recurring(store, first.id)
        assert stored.overlap is OverlapPolicy.QUEUE
        assert stored.fired_job_id == first.fired_job_id
        assert stored.last_skip_time == skipped.last_skip_time
        assert stored.last_fire_time == first.last_fire_time

    def test_racing_fires_of_one_occurrence_fire_skip_or_hold_it_once(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Schedulers firing the same occurrence: with the previous job ended, exactly
        one fires; with it active, ``skip`` skips it exactly once and ``queue`` holds it,
        and no racer inserts a job (never two runs at once)."""
        racers = self.contention.racers
        cases = [(OverlapPolicy.SKIP, FireOutcome.SKIPPED), (OverlapPolicy.QUEUE, FireOutcome.HELD)]
        for overlap, while_active in cases:
            definition = _fired_once(store, clock, overlap)
            for round_number in range(self.contention.rounds):
                stored = stored_recurring(store, definition.id)
                jobs, fires = _racing_fires(store, clock, stored, racers)
                active = round_number % 2 == 0
                if not active:
                    previous = _previous(store, stored)
                    if previous.state not in TERMINAL_JOB_STATES:
                        assert store.jobs.try_cancel(previous.id)

                outcomes = race(store, fires)

                inserted = [job for job in jobs if store.jobs.get_job(job.id) is not None]
                if active:
                    expected = {while_active: 1 if overlap is OverlapPolicy.SKIP else racers}
                    assert inserted == []
                else:
                    expected = {FireOutcome.FIRED: 1}
                    assert len(inserted) == 1
                    assert stored_recurring(store, definition.id).fired_job_id == inserted[0].id
                expected.setdefault(FireOutcome.LOST, racers - sum(expected.values()))
                counted = {outcome: outcomes.count(outcome) for outcome in set(outcomes)}
                assert counted == {k: v for k, v in expected.items() if v}, (overlap, counted)
                if active and overlap is OverlapPolicy.QUEUE:
                    # Still held: end the previous job so the next round can go on.
                    assert store.jobs.try_cancel(_previous(store, stored).id)
                    assert _fire(store, clock, definition.id)[0] is FireOutcome.FIRED

    def test_a_fire_racing_the_end_of_the_previous_job_never_runs_two_at_once(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Fires of a ``skip`` occurrence racing the cancel of the previous job: at most
        one fire wins, the others are lost or skipped, and at most one fired job of the
        definition is active afterwards."""
        racers = self.contention.racers
        definition = _fired_once(store, clock, OverlapPolicy.SKIP)
        for _ in range(self.contention.rounds):
            stored = stored_recurring(store, definition.id)
            previous = stored.fired_job_id
            assert previous is not None
            jobs, fires = _racing_fires(store, clock, stored, racers - 1)
            actions: list[Callable[[], object]] = list(fires)
            actions.insert(racers // 2, partial(store.jobs.try_cancel, previous))

            outcomes = race(store, actions)

            fired = [o for o in outcomes if o is FireOutcome.FIRED]
            skipped = [o for o in outcomes if o is FireOutcome.SKIPPED]
            assert len(fired) + len(skipped) == 1, outcomes
            active = [
                job.id
                for job in jobs
                if (found := store.jobs.get_job(job.id)) is not None
                and found.state not in TERMINAL_JOB_STATES
            ]
            assert len(active) == len(fired)
            assert stored_job(store, previous).state is JobState.CANCELLED
