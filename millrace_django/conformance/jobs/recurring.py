"""Recurring definitions: upsert semantics and the compare-and-set fire."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from functools import partial
from typing import Any, ClassVar
from uuid import UUID

from millrace_django.clock import FakeClock
from millrace_django.conformance.harness import StoreUnderTest
from millrace_django.conformance.suite import FactGroup
from millrace_django.conformance.support import (
    assert_same_invocation,
    define_recurring,
    make_job,
    make_recurring,
    race,
    stored_job,
    stored_recurring,
)
from millrace_django.contract import (
    FireOutcome,
    Invocation,
    JobRecord,
    JobState,
    RecurringRecord,
    RetryKind,
    RetrySpec,
)


def _assert_same_recurring(got: RecurringRecord, expected: RecurringRecord) -> None:
    assert got.id == expected.id
    assert got.cron == expected.cron
    assert got.timezone == expected.timezone
    assert got.queue == expected.queue
    assert_same_invocation(got.invocation, expected.invocation)
    assert got.next_fire_time == expected.next_fire_time
    assert got.created_at == expected.created_at
    assert got.updated_at == expected.updated_at
    assert got.retry == expected.retry
    assert got.priority == expected.priority
    assert got.tenant_id == expected.tenant_id
    assert got.last_fire_time == expected.last_fire_time


def _fired_job(clock: FakeClock, recurring_id: str) -> JobRecord:
    return make_job(clock, recurring_id=recurring_id)


def _changed(record: RecurringRecord, clock: FakeClock, **fields: Any) -> RecurringRecord:
    """``record`` as a redeploy would upsert it: every overwritable field changed."""
    values: dict[str, Any] = {
        "id": record.id,
        "cron": record.cron,
        "timezone": record.timezone,
        "queue": "changed-queue",
        "invocation": Invocation(target="conformance.changed:run", kwargs={"v": [2, "ü"]}),
        "retry": RetrySpec(
            kind=RetryKind.FIXED, max_attempts=4, base_delay=timedelta(seconds=9), jitter=True
        ),
        "priority": record.priority + 7,
        "tenant_id": "tenant-changed",
        "next_fire_time": record.next_fire_time + timedelta(days=3),
        "created_at": clock.now(),
        "updated_at": clock.now(),
        "last_fire_time": None,
    }
    values.update(fields)
    return RecurringRecord(**values)


def _upserted_then_fired(store: StoreUnderTest, clock: FakeClock) -> tuple[RecurringRecord, UUID]:
    """A stored definition that has fired once (so it has a last_fire_time) and its job."""
    original = define_recurring(store, clock, priority=1)
    job = _fired_job(clock, original.id)
    fired_next = original.next_fire_time + timedelta(days=1)
    fired = store.jobs.try_fire_recurring(original.id, original.next_fire_time, fired_next, job)
    assert fired is FireOutcome.FIRED
    clock.advance(timedelta(hours=1))
    return stored_recurring(store, original.id), job.id


class RecurringFacts(FactGroup):
    heading: ClassVar[str] = "Recurring"

    def test_recurring_upsert_roundtrips_all_fields(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """A first upsert stores every field as given; GetRecurring returns them exactly."""
        full = make_recurring(
            clock,
            "reports/weekly-ü",
            cron="*/15 9-17 * * MON-FRI",
            timezone="Europe/Paris",
            queue="reports",
            invocation=Invocation(
                target="reports.tasks:weekly",
                args=["Zoë ✓", 3.5, [1, {"a": None}]],
                kwargs={"format": "pdf", "pages": [1, 2], "draft": True},
            ),
            next_fire_time=clock.now() + timedelta(hours=2, minutes=15),
            created_at=clock.now() - timedelta(days=2),
            updated_at=clock.now() - timedelta(days=1),
            retry=RetrySpec(
                kind=RetryKind.EXPONENTIAL,
                max_attempts=6,
                base_delay=timedelta(seconds=5),
                max_delay=timedelta(minutes=30),
                jitter=True,
            ),
            priority=-3,
            tenant_id="acme",
        )
        bare = make_recurring(clock, "bare", invocation=Invocation(target="conformance.bare:run"))
        store.jobs.upsert_recurring(full)
        store.jobs.upsert_recurring(bare)

        _assert_same_recurring(stored_recurring(store, full.id), full)
        _assert_same_recurring(stored_recurring(store, bare.id), bare)
        assert stored_recurring(store, bare.id).timezone == "UTC"
        assert stored_recurring(store, full.id).last_fire_time is None
        assert store.jobs.get_recurring("never-stored") is None

    def test_recurring_upsert_with_same_cron_preserves_next_fire_time(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Same-schedule upsert overwrites the rest but keeps next/last fire time, created_at."""
        before, _ = _upserted_then_fired(store, clock)
        update = _changed(before, clock)

        store.jobs.upsert_recurring(update)

        expected = _changed(
            before,
            clock,
            next_fire_time=before.next_fire_time,
            last_fire_time=before.last_fire_time,
            created_at=before.created_at,
        )
        _assert_same_recurring(stored_recurring(store, before.id), expected)

    def test_recurring_upsert_with_changed_cron_takes_the_records_next_fire_time(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """A changed cron takes the record's next_fire_time; last fire and created_at stay."""
        before, _ = _upserted_then_fired(store, clock)
        update = _changed(before, clock, cron="30 4 * * *")

        store.jobs.upsert_recurring(update)

        expected = _changed(
            before,
            clock,
            cron="30 4 * * *",
            last_fire_time=before.last_fire_time,
            created_at=before.created_at,
        )
        _assert_same_recurring(stored_recurring(store, before.id), expected)
        assert expected.next_fire_time != before.next_fire_time

    def test_recurring_upsert_with_a_changed_time_zone_takes_the_records_next_fire_time(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """A changed time zone is a schedule change: the record's next_fire_time is taken."""
        before, _ = _upserted_then_fired(store, clock)
        update = _changed(before, clock, timezone="America/New_York")

        store.jobs.upsert_recurring(update)

        expected = _changed(
            before,
            clock,
            timezone="America/New_York",
            last_fire_time=before.last_fire_time,
            created_at=before.created_at,
        )
        _assert_same_recurring(stored_recurring(store, before.id), expected)
        assert expected.next_fire_time != before.next_fire_time

    def test_get_due_recurring_returns_due_only_within_batch_limit(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """GetDueRecurring lists next_fire_time <= now, most overdue first, at most limit."""
        now = clock.now()
        fire_times = {
            "due-now": now,
            "future": now + timedelta(minutes=1),
            "overdue-10": now - timedelta(minutes=10),
            "overdue-5": now - timedelta(minutes=5),
        }
        for recurring_id, fire_time in fire_times.items():
            define_recurring(store, clock, recurring_id, next_fire_time=fire_time)

        due = store.jobs.get_due_recurring(now, 10)
        assert [r.id for r in due] == ["overdue-10", "overdue-5", "due-now"]
        assert [r.next_fire_time for r in due] == [fire_times[r.id] for r in due]
        assert [r.id for r in store.jobs.get_due_recurring(now, 1)] == ["overdue-10"]
        assert [r.id for r in store.jobs.get_due_recurring(now, 2)] == ["overdue-10", "overdue-5"]
        assert stored_recurring(store, "overdue-10").next_fire_time == fire_times["overdue-10"]
        assert stored_recurring(store, "overdue-10").last_fire_time is None

    def test_try_fire_cas_has_exactly_one_winner_and_one_enqueued_job(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Racers firing one occurrence: one wins, advances the definition, inserts one job."""
        racers = self.contention.racers
        definition = define_recurring(store, clock)
        expected = definition.next_fire_time
        for _ in range(self.contention.rounds):
            following = expected + timedelta(days=1)
            jobs = [_fired_job(clock, definition.id) for _ in range(racers)]
            fires: list[Callable[[], FireOutcome]] = [
                partial(store.jobs.try_fire_recurring, definition.id, expected, following, job)
                for job in jobs
            ]
            won = [outcome is FireOutcome.FIRED for outcome in race(store, fires)]

            assert won.count(True) == 1, f"{won.count(True)} racers fired one occurrence"
            assert won.count(False) == racers - 1
            stored = stored_recurring(store, definition.id)
            assert stored.next_fire_time == following
            assert stored.last_fire_time == expected
            for job, fired in zip(jobs, won, strict=True):
                found = store.jobs.get_job(job.id)
                if fired:
                    assert found is not None, "the winner's job was not inserted"
                    assert found.state is JobState.ENQUEUED
                    assert found.recurring_id == definition.id
                else:
                    assert found is None, "a losing fire inserted its job"
            expected = following

    def test_try_fire_with_stale_expected_time_is_lost_and_inserts_nothing(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """A fire whose expected time is not the stored next_fire_time changes nothing."""
        definition = define_recurring(store, clock)
        current = definition.next_fire_time
        following = current + timedelta(days=1)

        for stale in (current - timedelta(minutes=1), current + timedelta(minutes=1)):
            job = _fired_job(clock, definition.id)
            lost = store.jobs.try_fire_recurring(definition.id, stale, following, job)
            assert lost is FireOutcome.LOST
            assert store.jobs.get_job(job.id) is None
        _assert_same_recurring(stored_recurring(store, definition.id), definition)

        fired = store.jobs.try_fire_recurring(
            definition.id, current, following, _fired_job(clock, definition.id)
        )
        assert fired is FireOutcome.FIRED
        replay = _fired_job(clock, definition.id)
        later = following + timedelta(days=1)
        replayed = store.jobs.try_fire_recurring(definition.id, current, later, replay)
        assert replayed is FireOutcome.LOST
        assert store.jobs.get_job(replay.id) is None
        stored = stored_recurring(store, definition.id)
        assert stored.next_fire_time == following
        assert stored.last_fire_time == current

    def test_try_fire_unknown_id_is_lost(self, store: StoreUnderTest, clock: FakeClock) -> None:
        """Firing an id that has no definition is LOST and inserts nothing."""
        define_recurring(store, clock, "known")
        job = _fired_job(clock, "unknown")
        expected = clock.now() + timedelta(hours=3)

        assert store.jobs.try_fire_recurring("unknown", expected, expected, job) is FireOutcome.LOST
        assert store.jobs.get_job(job.id) is None
        assert store.jobs.get_recurring("unknown") is None

    def test_remove_recurring_removes_the_definition(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Removing deletes the definition only: it no longer reads or fires; fired jobs stay."""
        before, fired_id = _upserted_then_fired(store, clock)

        assert store.jobs.remove_recurring(before.id) is True

        assert store.jobs.get_recurring(before.id) is None
        late = clock.now() + timedelta(days=365)
        assert store.jobs.get_due_recurring(late, 10) == []
        job = _fired_job(clock, before.id)
        following = before.next_fire_time + timedelta(days=1)
        lost = store.jobs.try_fire_recurring(before.id, before.next_fire_time, following, job)
        assert lost is FireOutcome.LOST
        assert store.jobs.get_job(job.id) is None
        assert stored_job(store, fired_id).recurring_id == before.id

    def test_remove_recurring_reports_whether_the_definition_existed(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Remove returns True for a stored definition, False for an unknown or removed one."""
        define_recurring(store, clock, "kept")
        define_recurring(store, clock, "doomed")

        assert store.jobs.remove_recurring("never-stored") is False
        assert store.jobs.remove_recurring("doomed") is True
        assert store.jobs.remove_recurring("doomed") is False
        assert store.jobs.get_recurring("kept") is not None

    def test_same_cron_upsert_racing_fire_never_rewinds_next_fire_time(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """A same-cron upsert racing fires never rewinds or loses the fire: one fire wins."""
        racers = self.contention.racers
        for round_number in range(self.contention.rounds):
            definition = define_recurring(store, clock, f"race-{round_number}")
            expected = definition.next_fire_time
            following = expected + timedelta(days=1)
            clock.advance(timedelta(minutes=1))
            update = _changed(definition, clock)
            jobs = [_fired_job(clock, definition.id) for _ in range(racers - 1)]
            actions: list[Callable[[], object]] = [
                partial(store.jobs.try_fire_recurring, definition.id, expected, following, job)
                for job in jobs
            ]
            # The upsert's position rotates, so it sometimes starts before every fire.
            upsert_at = round_number % racers
            actions.insert(upsert_at, partial(store.jobs.upsert_recurring, update))

            outcomes = race(store, actions)
            won = [
                outcome is FireOutcome.FIRED
                for outcome in outcomes[:upsert_at] + outcomes[upsert_at + 1 :]
            ]

            assert won.count(True) == 1, f"{won.count(True)} fires won one occurrence"
            stored = stored_recurring(store, definition.id)
            assert stored.next_fire_time == following, "the next fire time was rewound"
            assert stored.last_fire_time == expected
            assert stored.queue == update.queue
            assert stored.priority == update.priority
            assert stored.created_at == definition.created_at
            for job, fired in zip(jobs, won, strict=True):
                assert (store.jobs.get_job(job.id) is not None) is (fired is True)
