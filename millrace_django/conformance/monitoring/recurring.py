"""Recurring definitions: soonest first, keyset-paged, with the outcome of the last fire."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any
from uuid import UUID

import pytest

from millrace_django.clock import FakeClock
from millrace_django.conformance.harness import StoreUnderTest
from millrace_django.conformance.suite import FactGroup
from millrace_django.conformance.support import (
    claim_one,
    define_recurring,
    die,
    enqueue,
    ids_of,
    job_cursor,
    make_job,
    make_recurring,
    stored_recurring,
    succeed,
    walk_pages,
)
from millrace_django.contract import (
    DEFAULT_PAGE_SIZE,
    FireOutcome,
    Invocation,
    JobState,
    OverlapPolicy,
    Page,
    RecurringQuery,
    RecurringSummary,
    TenantFilter,
)
from millrace_django.errors import InvalidCursor

UNDECODABLE_CURSORS = ["not-a-cursor", "!!not-a-cursor!!", "%%%", ""]


def _query(store: StoreUnderTest, **fields: Any) -> Page[RecurringSummary]:
    return store.monitoring.query_recurring(RecurringQuery(**fields))


def _only(store: StoreUnderTest, recurring_id: str) -> RecurringSummary:
    (summary,) = [s for s in _query(store).items if s.id == recurring_id]
    return summary


def _fire(store: StoreUnderTest, clock: FakeClock, recurring_id: str, queue: str) -> UUID:
    """Fire the definition at its due time, inserting a job in ``queue``; the job's id."""
    record = stored_recurring(store, recurring_id)
    clock.set(max(clock.now(), record.next_fire_time))
    job = make_job(clock, queue=queue, recurring_id=recurring_id)
    fired = store.jobs.try_fire_recurring(
        recurring_id, record.next_fire_time, record.next_fire_time + timedelta(days=1), job
    )
    assert fired is FireOutcome.FIRED
    return job.id


class RecurringQueryFacts(FactGroup):
    heading = "Recurring definitions"

    def test_recurring_definitions_are_ordered_soonest_first(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Recurring definitions are ordered soonest first."""
        now = clock.now()
        for recurring_id, hours in (("a-late", 3), ("b-soon", 1), ("c-middle", 2), ("d-due", 0)):
            define_recurring(
                store, clock, recurring_id, next_fire_time=now + timedelta(hours=hours)
            )
            clock.advance(timedelta(seconds=1))
        assert ids_of(_query(store)) == ["d-due", "b-soon", "c-middle", "a-late"]

    def test_a_definition_that_has_never_fired_reports_no_last_outcome(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """A definition that has never fired reports no last outcome."""
        define_recurring(store, clock, "nightly")
        enqueue(store, clock, recurring_id="nightly-report")
        enqueue(store, clock)
        summary = _only(store, "nightly")
        assert (summary.last_outcome, summary.last_job_id) == (None, None)

    def test_the_last_outcome_is_the_state_of_the_most_recently_created_fired_job(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """The last outcome is the state of the most recently created fired job."""
        define_recurring(store, clock, "nightly")
        define_recurring(store, clock, "hourly", next_fire_time=clock.now() + timedelta(days=30))
        older = _fire(store, clock, "nightly", "first")
        clock.advance(timedelta(minutes=1))
        newer = _fire(store, clock, "nightly", "second")
        clock.advance(timedelta(minutes=1))
        enqueue(store, clock, queue="unrelated", recurring_id="nightly-report")
        enqueue(store, clock, queue="unrelated")
        dying = claim_one(store, queues=["second"])
        assert store.jobs.apply(die(dying, clock))
        clock.advance(timedelta(minutes=1))
        finishing_last = claim_one(store, queues=["first"])
        assert finishing_last.id == older
        assert store.jobs.apply(succeed(finishing_last, clock))
        summary = _only(store, "nightly")
        assert (summary.last_outcome, summary.last_job_id) == (JobState.DEAD, newer)
        assert _only(store, "hourly").last_outcome is None

    def test_a_running_occurrence_outranks_an_earlier_success(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """A running occurrence outranks an earlier success."""
        define_recurring(store, clock, "nightly")
        earlier = _fire(store, clock, "nightly", "first")
        clock.advance(timedelta(minutes=1))
        running = _fire(store, clock, "nightly", "second")
        summary = _only(store, "nightly")
        assert (summary.last_outcome, summary.last_job_id) == (JobState.ENQUEUED, running)
        claim_one(store, queues=["second"])
        done = claim_one(store, queues=["first"])
        assert done.id == earlier
        assert store.jobs.apply(succeed(done, clock))
        summary = _only(store, "nightly")
        assert (summary.last_outcome, summary.last_job_id) == (JobState.PROCESSING, running)

    def test_the_link_to_a_definition_survives_the_definition_being_removed(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """The link to a definition survives the definition being removed."""
        define_recurring(store, clock, "nightly")
        fired = _fire(store, clock, "nightly", "default")
        assert store.jobs.remove_recurring("nightly")
        assert ids_of(_query(store)) == []
        job = store.jobs.get_job(fired)
        details = store.monitoring.get_job_details(fired)
        assert job is not None
        assert details is not None
        assert (job.recurring_id, details.recurring_id) == ("nightly", "nightly")
        define_recurring(store, clock, "nightly")
        summary = _only(store, "nightly")
        assert (summary.last_outcome, summary.last_job_id) == (JobState.ENQUEUED, fired)

    def test_recurring_paging_walks_every_definition_exactly_once(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Recurring paging walks every definition exactly once (fire-time ties included)."""
        now = clock.now()
        hours = {"g": 1, "c": 5, "a": 3, "f": 3, "b": 1, "e": 2, "d": 3}
        for recurring_id, offset in hours.items():
            define_recurring(
                store, clock, recurring_id, next_fire_time=now + timedelta(hours=offset)
            )
        pages = walk_pages(store.monitoring.query_recurring, RecurringQuery(limit=2))
        assert [len(page) for page in pages] == [2, 2, 2, 1]
        walked = [recurring_id for page in pages for recurring_id in page]
        assert walked == sorted(hours, key=lambda r: (hours[r], r))

    def test_recurring_ties_on_fire_time_break_by_id(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Recurring ties on fire time break by id, also across pages."""
        due = clock.now() + timedelta(hours=1)
        for recurring_id in ("zebra", "alpha", "mango"):
            define_recurring(store, clock, recurring_id, next_fire_time=due)
            clock.advance(timedelta(seconds=1))
        define_recurring(store, clock, "aardvark", next_fire_time=due + timedelta(seconds=1))
        expected = ["alpha", "mango", "zebra", "aardvark"]
        assert ids_of(_query(store)) == expected
        assert walk_pages(store.monitoring.query_recurring, RecurringQuery(limit=1)) == [
            [recurring_id] for recurring_id in expected
        ]

    def test_recurring_filters_by_queue_and_tenant_and_clamps_the_limit(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Recurring filters by queue and tenant and clamps the limit."""
        now = clock.now()
        for n, (queue, tenant) in enumerate(
            [("mail", "acme"), ("mail", None), ("default", "acme"), ("default", None)]
        ):
            define_recurring(
                store,
                clock,
                f"r{n}",
                queue=queue,
                tenant_id=tenant,
                next_fire_time=now + timedelta(minutes=n),
            )
        assert ids_of(_query(store, queue="mail")) == ["r0", "r1"]
        assert ids_of(_query(store, tenant=TenantFilter.of("acme"))) == ["r0", "r2"]
        assert ids_of(_query(store, tenant=TenantFilter.untenanted())) == ["r1", "r3"]
        assert ids_of(_query(store, tenant=TenantFilter.any())) == ["r0", "r1", "r2", "r3"]
        assert ids_of(_query(store, queue="mail", tenant=TenantFilter.of("acme"))) == ["r0"]
        assert ids_of(_query(store, tenant=TenantFilter.of("globex"))) == []
        for limit in (0, -5, 10_000):
            page = _query(store, limit=limit)
            assert (ids_of(page), page.next_cursor) == (["r0", "r1", "r2", "r3"], None)
        for n in range(4, DEFAULT_PAGE_SIZE + 1):
            define_recurring(store, clock, f"r{n}", next_fire_time=now + timedelta(minutes=n))
        page = _query(store, limit=0)
        assert len(page.items) == DEFAULT_PAGE_SIZE
        assert page.next_cursor is not None

    @pytest.mark.parametrize("cursor", UNDECODABLE_CURSORS)
    def test_recurring_rejects_an_undecodable_cursor(
        self, store: StoreUnderTest, clock: FakeClock, cursor: str
    ) -> None:
        """Recurring rejects an undecodable cursor."""
        define_recurring(store, clock, "first")
        define_recurring(store, clock, "second")
        with pytest.raises(InvalidCursor):
            _query(store, cursor=cursor, limit=1)

    def test_a_job_cursor_is_rejected_by_the_recurring_query(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """A cursor of the job query is rejected by the recurring query."""
        define_recurring(store, clock, "first")
        define_recurring(store, clock, "second")
        cursor = job_cursor(store, clock)
        with pytest.raises(InvalidCursor):
            _query(store, cursor=cursor, limit=1)

    def test_recurring_summary_carries_schedule_fields_and_no_outcome(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Recurring summary carries schedule fields and no outcome before a fire."""
        created = clock.now()
        record = make_recurring(
            clock,
            "report",
            cron="*/5 * * * *",
            timezone="Europe/Paris",
            queue="reports",
            priority=3,
            tenant_id="acme",
            invocation=Invocation(target="reports.tasks:build", args=["weekly"]),
            next_fire_time=created + timedelta(minutes=5),
            updated_at=created + timedelta(seconds=1),
        )
        store.jobs.upsert_recurring(record)
        expected = RecurringSummary(
            id="report",
            cron="*/5 * * * *",
            timezone="Europe/Paris",
            queue="reports",
            target="reports.tasks:build",
            priority=3,
            tenant_id="acme",
            next_fire_time=created + timedelta(minutes=5),
            last_fire_time=None,
            last_outcome=None,
            last_job_id=None,
            created_at=created,
            updated_at=created + timedelta(seconds=1),
        )
        assert list(_query(store).items) == [expected]
        fired = _fire(store, clock, "report", "reports")
        (after,) = _query(store).items
        # Whether a fire also moves updated_at is left to the provider.
        assert after.updated_at >= expected.updated_at
        assert after == replace(
            expected,
            next_fire_time=expected.next_fire_time + timedelta(days=1),
            last_fire_time=expected.next_fire_time,
            last_outcome=JobState.ENQUEUED,
            last_job_id=fired,
            updated_at=after.updated_at,
        )

    def test_recurring_summary_carries_the_overlap_policy_and_the_last_skip(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """A definition lists its overlap policy, and the occurrence its ``skip`` dropped."""
        define_recurring(store, clock, "sync", overlap=OverlapPolicy.SKIP)
        define_recurring(store, clock, "plain")
        fired = _fire(store, clock, "sync", "syncs")
        assert _only(store, "sync").last_skip_time is None
        record = stored_recurring(store, "sync")
        clock.set(record.next_fire_time)
        skipped = store.jobs.try_fire_recurring(
            "sync",
            record.next_fire_time,
            record.next_fire_time + timedelta(days=1),
            make_job(clock, queue="syncs", recurring_id="sync"),
        )
        assert skipped is FireOutcome.SKIPPED

        summary = _only(store, "sync")
        assert summary.overlap is OverlapPolicy.SKIP
        assert summary.last_skip_time == record.next_fire_time
        assert summary.last_job_id == fired and summary.last_outcome is JobState.ENQUEUED
        plain = _only(store, "plain")
        assert (plain.overlap, plain.last_skip_time) == (OverlapPolicy.ALLOW, None)
