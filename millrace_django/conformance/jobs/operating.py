"""What operators do to waiting work: run a delayed job now; disable, enable and edit a
recurring definition."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from functools import partial
from typing import Any, ClassVar

from millrace_django.clock import FakeClock
from millrace_django.conformance.harness import StoreUnderTest
from millrace_django.conformance.suite import FactGroup
from millrace_django.conformance.support import (
    assert_same_invocation,
    claim,
    claim_one,
    define_recurring,
    enqueue,
    make_job,
    race,
    stored_job,
    stored_recurring,
)
from millrace_django.contract import (
    FireOutcome,
    Invocation,
    JobRecord,
    JobState,
    OverlapPolicy,
    RecurringChange,
    RecurringQuery,
    RecurringRecord,
    TenantFilter,
)


def _fire(store: StoreUnderTest, clock: FakeClock, record: RecurringRecord) -> FireOutcome:
    """Fire ``record``'s occurrence as a scheduler that read it would (a day on next)."""
    job = make_job(clock, queue=f"fired-{record.id}", recurring_id=record.id)
    following = record.next_fire_time + timedelta(days=1)
    return store.jobs.try_fire_recurring(record.id, record.next_fire_time, following, job)


def _fired_jobs(store: StoreUnderTest, record: RecurringRecord) -> list[JobRecord]:
    return claim(store, "counter", queues=(f"fired-{record.id}",), max_count=100)


class RunNowFacts(FactGroup):
    heading: ClassVar[str] = "Run now"

    def test_run_now_makes_a_scheduled_job_claimable_before_its_due_time(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Run now moves a scheduled (delayed) job to enqueued, due_at cleared, deadline kept;
        its due time no longer activates anything."""
        due = clock.now() + timedelta(hours=2)
        deadline = clock.now() + timedelta(hours=5)
        job_id = enqueue(
            store, clock, queue="delayed", state=JobState.SCHEDULED, due_at=due, expires_at=deadline
        )

        assert store.jobs.try_run_now(job_id) is True

        stored = stored_job(store, job_id)
        assert stored.state is JobState.ENQUEUED
        assert stored.due_at is None
        assert stored.expires_at == deadline
        assert stored.attempt == 0
        assert store.jobs.next_due_time(clock.now()) is None
        assert store.jobs.try_run_now(job_id) is False, "an enqueued job cannot run now again"
        claimed = claim_one(store, "w1", queues=("delayed",))
        assert claimed.id == job_id
        assert claimed.attempt == 1
        assert store.jobs.activate_due(due, 10) == 0

    def test_run_now_racing_itself_and_activation_enqueues_a_scheduled_job_once(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Run-now calls racing the due activation of one scheduled job: exactly one of
        them moves it, and it is claimed once."""
        racers = self.contention.racers
        for round_number in range(self.contention.rounds):
            queue = f"delayed-{round_number}"
            due = clock.now() + timedelta(minutes=1)
            job_id = enqueue(store, clock, queue=queue, state=JobState.SCHEDULED, due_at=due)
            actions: list[Callable[[], object]] = [
                partial(store.jobs.try_run_now, job_id) for _ in range(racers - 1)
            ]
            actions.insert(round_number % racers, partial(store.jobs.activate_due, due, 10))

            outcomes = race(store, actions)

            moved = sum(1 for outcome in outcomes if outcome is True or outcome == 1)
            assert moved == 1, f"{moved} calls moved one scheduled job"
            assert stored_job(store, job_id).state is JobState.ENQUEUED
            assert [job.id for job in claim(store, "w1", queues=(queue,), max_count=5)] == [job_id]


class DisabledRecurringFacts(FactGroup):
    heading: ClassVar[str] = "Disabled recurring definitions"

    def test_a_disabled_definition_is_never_due_never_fires_and_is_not_overdue(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Disabling keeps the definition but takes it out of GetDueRecurring, the next due
        time and the overdue count; a fire of its pending occurrence is LOST."""
        due = define_recurring(store, clock, "due", next_fire_time=clock.now())
        later = define_recurring(store, clock, "later", next_fire_time=clock.now() + timedelta(1))
        clock.advance(timedelta(minutes=1))

        assert store.jobs.disable_recurring(due.id) is True
        assert store.jobs.disable_recurring(later.id) is True
        assert store.jobs.disable_recurring(due.id) is True, "disabling again is a no-op"

        stored = stored_recurring(store, due.id)
        assert stored.enabled is False
        assert stored.next_fire_time == due.next_fire_time
        assert stored.updated_at == clock.now()
        assert store.jobs.get_due_recurring(clock.now() + timedelta(days=2), 10) == []
        assert store.jobs.next_due_time(clock.now()) is None
        stats = store.monitoring.get_statistics(TenantFilter.any())
        assert (stats.recurring_definitions, stats.overdue_recurring_definitions) == (2, 0)
        listed = store.monitoring.query_recurring(RecurringQuery()).items
        assert [(item.id, item.enabled) for item in listed] == [("due", False), ("later", False)]
        assert _fire(store, clock, stored) is FireOutcome.LOST
        assert _fired_jobs(store, stored) == []
        assert stored_recurring(store, due.id).last_fire_time is None

    def test_disable_racing_fires_lets_at_most_the_fires_before_it_through(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """A disable racing schedulers firing the same occurrence: at most one fires (one
        job), and once disabled no fire of it ever goes through."""
        racers = self.contention.racers
        for round_number in range(self.contention.rounds):
            definition = define_recurring(store, clock, f"race-{round_number}")
            fires: list[Callable[[], object]] = [
                partial(_fire, store, clock, definition) for _ in range(racers - 1)
            ]
            fires.insert(
                round_number % racers, partial(store.jobs.disable_recurring, definition.id)
            )

            outcomes = race(store, fires)

            fired = outcomes.count(FireOutcome.FIRED)
            assert fired <= 1, f"{fired} fires of one occurrence"
            assert len(_fired_jobs(store, definition)) == fired
            stored = stored_recurring(store, definition.id)
            assert stored.enabled is False
            assert _fire(store, clock, stored) is FireOutcome.LOST
            assert _fired_jobs(store, definition) == []

    def test_enable_resumes_from_the_given_fire_time_and_drops_the_missed_occurrences(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Enabling sets the next fire time it is given (occurrences missed while disabled
        never fire); the definition is due and fires from then on."""
        definition = define_recurring(store, clock, next_fire_time=clock.now())
        assert store.jobs.disable_recurring(definition.id)
        clock.advance(timedelta(days=3))
        resume_at = clock.now() + timedelta(hours=1)

        assert store.jobs.enable_recurring(definition.id, resume_at) is True

        stored = stored_recurring(store, definition.id)
        assert stored.enabled is True
        assert stored.next_fire_time == resume_at
        assert stored.updated_at == clock.now()
        assert stored.last_fire_time is None
        assert store.jobs.get_due_recurring(clock.now(), 10) == []
        assert store.jobs.next_due_time(clock.now()) == resume_at
        assert [r.id for r in store.jobs.get_due_recurring(resume_at, 10)] == [definition.id]
        assert _fire(store, clock, stored) is FireOutcome.FIRED
        assert len(_fired_jobs(store, definition)) == 1

    def test_enable_leaves_an_enabled_definition_and_its_pending_fire_time_alone(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Enabling an enabled definition changes nothing: its pending occurrence keeps its time."""
        definition = define_recurring(store, clock)
        clock.advance(timedelta(minutes=5))

        assert store.jobs.enable_recurring(definition.id, clock.now() + timedelta(days=9))

        stored = stored_recurring(store, definition.id)
        assert stored.enabled is True
        assert stored.next_fire_time == definition.next_fire_time
        assert stored.updated_at == definition.updated_at

    def test_disable_and_enable_report_whether_the_definition_exists(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Disable and enable of an unknown id return False and create nothing."""
        assert store.jobs.disable_recurring("never-stored") is False
        assert store.jobs.enable_recurring("never-stored", clock.now()) is False
        assert store.jobs.get_recurring("never-stored") is None

    def test_upserts_keep_an_operators_choice_and_a_first_upsert_stores_it(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """A redeploy's upsert keeps a disabled definition disabled (and an enabled one
        enabled); a first upsert of a disabled record stores it disabled."""
        definition = define_recurring(store, clock)
        assert store.jobs.disable_recurring(definition.id)

        store.jobs.upsert_recurring(definition)
        assert stored_recurring(store, definition.id).enabled is False

        fresh = define_recurring(store, clock, "born-disabled", enabled=False)
        assert stored_recurring(store, fresh.id).enabled is False
        assert store.jobs.enable_recurring(fresh.id, clock.now() + timedelta(hours=1))
        store.jobs.upsert_recurring(fresh)
        assert stored_recurring(store, fresh.id).enabled is True


def _edit(store: StoreUnderTest, record: RecurringRecord, **changes: Any) -> bool:
    """Edit ``record``'s stored definition: its own schedule and invocation unless changed."""
    values: dict[str, Any] = {
        "cron": record.cron,
        "timezone": record.timezone,
        "invocation": record.invocation,
        "next_fire_time": record.next_fire_time + timedelta(days=30),
    }
    return store.jobs.edit_recurring(record.id, RecurringChange(**(values | changes)))


class RecurringEditFacts(FactGroup):
    heading: ClassVar[str] = "Recurring edits"

    def test_an_edit_writes_schedule_and_arguments_and_keeps_every_other_field(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """An edit writes the cron, time zone, invocation and next fire time (the schedule
        changed) and keeps queue, priority, retry, tenant, overlap, fire history and the
        enabled flag."""
        definition = define_recurring(
            store, clock, priority=4, tenant_id="acme", overlap=OverlapPolicy.SKIP
        )
        assert _fire(store, clock, definition) is FireOutcome.FIRED
        assert store.jobs.disable_recurring(definition.id)
        before = stored_recurring(store, definition.id)
        clock.advance(timedelta(minutes=3))
        invocation = Invocation(target="conformance.edited:run", args=["Zoë", 2])
        resume_at = clock.now() + timedelta(hours=5)

        edited = _edit(
            store,
            before,
            cron="15 4 * * *",
            timezone="Europe/Paris",
            invocation=invocation,
            next_fire_time=resume_at,
        )

        assert edited is True
        after = stored_recurring(store, definition.id)
        assert (after.cron, after.timezone) == ("15 4 * * *", "Europe/Paris")
        assert_same_invocation(after.invocation, invocation)
        assert (after.next_fire_time, after.updated_at) == (resume_at, clock.now())
        kept = ("queue", "priority", "retry", "tenant_id", "overlap", "last_fire_time")
        for name in (*kept, "fired_job_id", "last_skip_time", "enabled", "created_at"):
            assert getattr(after, name) == getattr(before, name), name

    def test_an_edit_of_the_arguments_alone_keeps_the_pending_fire_time(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """An edit with the stored cron and time zone keeps next_fire_time, whatever it is given."""
        definition = define_recurring(store, clock)

        assert _edit(store, definition, invocation=Invocation(target="conformance.other:run"))

        after = stored_recurring(store, definition.id)
        assert after.next_fire_time == definition.next_fire_time
        assert after.invocation.target == "conformance.other:run"

    def test_an_edit_of_an_unknown_or_removed_definition_creates_nothing(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Edit returns False for an id never stored or removed, and stores nothing."""
        definition = define_recurring(store, clock)
        assert store.jobs.remove_recurring(definition.id)

        assert _edit(store, definition, cron="*/5 * * * *") is False
        assert store.jobs.get_recurring(definition.id) is None

    def test_an_edit_racing_fires_never_rewinds_or_loses_the_fire(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """An arguments edit racing fires of one occurrence: one fire wins, its next fire
        time stands, and the edit's arguments are stored."""
        racers = self.contention.racers
        invocation = Invocation(target="conformance.raced:run", kwargs={"n": 1})
        for round_number in range(self.contention.rounds):
            definition = define_recurring(store, clock, f"edit-race-{round_number}")
            actions: list[Callable[[], object]] = [
                partial(_fire, store, clock, definition) for _ in range(racers - 1)
            ]
            edit = partial(_edit, store, definition, invocation=invocation)
            actions.insert(round_number % racers, edit)

            outcomes = race(store, actions)

            assert outcomes.count(FireOutcome.FIRED) == 1
            stored = stored_recurring(store, definition.id)
            assert stored.next_fire_time == definition.next_fire_time + timedelta(days=1)
            assert stored.last_fire_time == definition.next_fire_time
            assert_same_invocation(stored.invocation, invocation)
