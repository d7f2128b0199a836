"""Job queries: filters, keyset paging with opaque cursors, and the detail read."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

import pytest

from millrace_django.clock import FakeClock
from millrace_django.conformance.harness import StoreUnderTest
from millrace_django.conformance.suite import FactGroup
from millrace_django.conformance.support import (
    LEASE,
    claim_one,
    die,
    enqueue,
    fail,
    ids_of,
    job_details,
    make_instance,
    make_job,
    recurring_cursor,
    succeed,
    walk_pages,
)
from millrace_django.contract import (
    CONTINUATION_CAP,
    DEFAULT_PAGE_SIZE,
    MAX_PAGE_SIZE,
    Invocation,
    JobQuery,
    JobRecord,
    JobState,
    JobSummary,
    Page,
    RetryKind,
    RetrySpec,
    TenantFilter,
)
from millrace_django.errors import InvalidCursor
from millrace_django.ids import new_id

UNDECODABLE_CURSORS = ["not-a-cursor", "!!not-a-cursor!!", "%%%", " ", "a"]


def _query(store: StoreUnderTest, **fields: Any) -> Page[JobSummary]:
    return store.monitoring.query_jobs(JobQuery(**fields))


def _seed_with_ties(store: StoreUnderTest, clock: FakeClock, count: int) -> list[UUID]:
    """``count`` jobs, two per ``created_at`` instant, each pair inserted in descending id
    order; returns the ids newest first as the query must order them."""
    keyed: list[tuple[datetime, UUID]] = []
    while len(keyed) < count:
        clock.advance(timedelta(seconds=1))
        pair = sorted([new_id(clock), new_id(clock)], reverse=True)[: count - len(keyed)]
        store.jobs.enqueue([make_job(clock, id=job_id) for job_id in pair])
        keyed += [(clock.now(), job_id) for job_id in pair]
    return [job_id for _, job_id in sorted(keyed, reverse=True)]


def _claimed_from(store: StoreUnderTest, clock: FakeClock, queue: str) -> JobRecord:
    clock.advance(timedelta(seconds=1))
    enqueue(store, clock, queue=queue)
    return claim_one(store, queues=[queue])


def _one_job_in_each_state(store: StoreUnderTest, clock: FakeClock) -> list[tuple[JobState, UUID]]:
    """One job per state, created one second apart, oldest first."""
    made: list[tuple[JobState, UUID]] = []

    def fresh(**fields: Any) -> UUID:
        clock.advance(timedelta(seconds=1))
        return enqueue(store, clock, **fields)

    made.append((JobState.ENQUEUED, fresh()))
    made.append((JobState.SCHEDULED, fresh(state=JobState.SCHEDULED, due_at=clock.now() + LEASE)))
    running = _claimed_from(store, clock, "running")
    made.append((JobState.PROCESSING, running.id))
    made.append((JobState.AWAITING, fresh(state=JobState.AWAITING, parent_id=running.id)))
    done = _claimed_from(store, clock, "done")
    assert store.jobs.apply(succeed(done, clock))
    made.append((JobState.SUCCEEDED, done.id))
    retrying = _claimed_from(store, clock, "retrying")
    assert store.jobs.apply(fail(retrying, clock, retry_in=timedelta(hours=1)))
    made.append((JobState.FAILED, retrying.id))
    dead = _claimed_from(store, clock, "dead")
    assert store.jobs.apply(die(dead, clock))
    made.append((JobState.DEAD, dead.id))
    cancelled = fresh()
    assert store.jobs.try_cancel(cancelled)
    made.append((JobState.CANCELLED, cancelled))
    assert {state for state, _ in made} == set(JobState)
    return made


class JobQueryFacts(FactGroup):
    heading = "Job queries and paging"

    def test_query_orders_newest_first(self, store: StoreUnderTest, clock: FakeClock) -> None:
        """Query orders newest first (created_at, then id, descending)."""
        oldest = enqueue(store, clock)
        clock.advance(timedelta(seconds=1))
        middle = enqueue(store, clock, priority=10)
        clock.advance(timedelta(seconds=1))
        newest = enqueue(store, clock, queue="other")
        tied = _seed_with_ties(store, clock, 2)
        assert ids_of(_query(store)) == [*tied, newest, middle, oldest]

    def test_paging_walks_every_row_exactly_once(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Paging walks every row exactly once, in order, ties on created_at included."""
        expected = _seed_with_ties(store, clock, 10)
        pages = walk_pages(store.monitoring.query_jobs, JobQuery(limit=3))
        assert [len(page) for page in pages] == [3, 3, 3, 1]
        assert [job_id for page in pages for job_id in page] == expected

    def test_last_page_reports_a_null_cursor(self, store: StoreUnderTest, clock: FakeClock) -> None:
        """Last page reports a null cursor, also when it is exactly full."""
        expected = _seed_with_ties(store, clock, 6)
        first = _query(store, limit=3)
        assert first.next_cursor is not None
        last = _query(store, limit=3, cursor=first.next_cursor)
        assert ids_of(first) + ids_of(last) == expected
        assert last.next_cursor is None
        assert _query(store, limit=6).next_cursor is None
        assert _query(store, limit=7).next_cursor is None

    def test_empty_result_has_no_items_and_no_cursor(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Empty result has no items and no cursor."""
        empty = _query(store)
        assert (list(empty.items), empty.next_cursor) == ([], None)
        enqueue(store, clock)
        filtered = _query(store, queue="nowhere", limit=1)
        assert (list(filtered.items), filtered.next_cursor) == ([], None)

    def test_paging_is_stable_when_rows_change_state_underneath(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Paging is stable when rows change state (or new rows arrive) underneath."""
        expected = _seed_with_ties(store, clock, 10)
        seen: list[UUID] = []
        page = _query(store, limit=3)
        seen += ids_of(page)
        for job_id in expected[::2]:
            assert store.jobs.try_cancel(job_id)
        clock.advance(timedelta(seconds=1))
        enqueue(store, clock)
        claim_one(store, max_count=1)
        while page.next_cursor is not None:
            page = _query(store, limit=3, cursor=page.next_cursor)
            seen += ids_of(page)
            clock.advance(timedelta(seconds=1))
            enqueue(store, clock)
            assert len(seen) <= len(expected), "paging repeated rows"
        assert seen == expected

    @pytest.mark.parametrize("cursor", UNDECODABLE_CURSORS)
    def test_an_undecodable_cursor_is_rejected_rather_than_restarting(
        self, store: StoreUnderTest, clock: FakeClock, cursor: str
    ) -> None:
        """An undecodable cursor is rejected rather than restarting."""
        _seed_with_ties(store, clock, 4)
        with pytest.raises(InvalidCursor):
            _query(store, cursor=cursor, limit=2)

    def test_a_recurring_cursor_is_rejected_by_the_job_query(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """A cursor of the recurring query is rejected by the job query."""
        _seed_with_ties(store, clock, 4)
        cursor = recurring_cursor(store, clock)
        with pytest.raises(InvalidCursor):
            _query(store, cursor=cursor, limit=2)

    def test_limit_is_clamped_never_rejected(self, store: StoreUnderTest, clock: FakeClock) -> None:
        """Limit is clamped, never rejected (below one: the default; above the max: the max)."""
        store.jobs.enqueue([make_job(clock) for _ in range(MAX_PAGE_SIZE + 1)])
        for small in (0, -5):
            page = _query(store, limit=small)
            assert len(page.items) == DEFAULT_PAGE_SIZE
            assert page.next_cursor is not None
        for large in (MAX_PAGE_SIZE, 10_000):
            page = _query(store, limit=large)
            assert len(page.items) == MAX_PAGE_SIZE
            assert page.next_cursor is not None
            rest = _query(store, limit=large, cursor=page.next_cursor)
            assert (len(rest.items), rest.next_cursor) == (1, None)

    def test_state_filter_selects_only_those_states(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """State filter selects only those states."""
        made = _one_job_in_each_state(store, clock)
        newest_first = made[::-1]
        for chosen in (
            {JobState.SUCCEEDED, JobState.CANCELLED, JobState.AWAITING},
            {JobState.FAILED},
            {JobState.PROCESSING, JobState.SCHEDULED, JobState.DEAD},
        ):
            page = _query(store, states=frozenset(chosen))
            assert ids_of(page) == [job_id for state, job_id in newest_first if state in chosen]
            assert {item.state for item in page.items} == chosen

    def test_empty_state_list_means_any_state(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Empty state list means any state."""
        made = _one_job_in_each_state(store, clock)
        page = _query(store, states=frozenset())
        assert ids_of(page) == [job_id for _, job_id in made[::-1]]
        assert [item.state for item in page.items] == [state for state, _ in made[::-1]]

    def test_queue_and_created_range_filters_combine_with_and(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Queue and created range filters combine with AND."""
        start = clock.now()
        rows: list[tuple[int, str, UUID]] = []
        for second in range(4):
            for queue in ("mail", "billing"):
                rows.append((second, queue, enqueue(store, clock, queue=queue)))
            clock.advance(timedelta(seconds=1))
        after, before = start + timedelta(seconds=1), start + timedelta(seconds=3)
        page = _query(store, queue="mail", created_after=after, created_before=before)
        assert ids_of(page) == [i for s, q, i in rows[::-1] if q == "mail" and 1 <= s < 3]
        only_after = _query(store, queue="billing", created_after=after)
        assert ids_of(only_after) == [i for s, q, i in rows[::-1] if q == "billing" and s >= 1]
        only_before = _query(store, created_before=before, states=frozenset({JobState.ENQUEUED}))
        assert ids_of(only_before) == [i for s, _, i in rows[::-1] if s < 3]

    def test_created_range_is_lower_inclusive_and_upper_exclusive(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Created range is lower inclusive and upper exclusive."""
        t0 = clock.now()
        first = enqueue(store, clock)
        t1 = clock.advance(timedelta(seconds=1))
        second = enqueue(store, clock)
        t2 = clock.advance(timedelta(seconds=1))
        third = enqueue(store, clock)
        assert ids_of(_query(store, created_after=t1, created_before=t2)) == [second]
        assert ids_of(_query(store, created_after=t1)) == [third, second]
        assert ids_of(_query(store, created_before=t1)) == [first]
        assert ids_of(_query(store, created_after=t0, created_before=t0)) == []
        micro = timedelta(microseconds=1)
        assert ids_of(_query(store, created_after=t1 + micro, created_before=t2 + micro)) == [third]

    def test_tenant_filter_distinguishes_any_from_untenanted(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Tenant filter distinguishes any from untenanted."""
        by_tenant: dict[str | None, list[UUID]] = {None: [], "acme": [], "globex": []}
        for tenant in (None, "acme", None, "globex", "acme"):
            clock.advance(timedelta(seconds=1))
            by_tenant[tenant].insert(0, enqueue(store, clock, tenant_id=tenant))
        assert len(_query(store, tenant=TenantFilter.any()).items) == 5
        assert ids_of(_query(store, tenant=TenantFilter.untenanted())) == by_tenant[None]
        assert ids_of(_query(store, tenant=TenantFilter.of("acme"))) == by_tenant["acme"]
        assert ids_of(_query(store, tenant=TenantFilter.of("initech"))) == []
        page = _query(store, tenant=TenantFilter.of("acme"))
        assert {item.tenant_id for item in page.items} == {"acme"}

    def test_job_details_returns_null_for_an_unknown_id(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Job details returns null for an unknown id."""
        enqueue(store, clock)
        assert store.monitoring.get_job_details(new_id(clock)) is None

    def test_job_details_carries_the_payload_the_summary_omits(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Job details carries the payload the summary omits."""
        parent = _claimed_from(store, clock, "parents")
        assert store.jobs.apply(succeed(parent, clock))
        invocation = Invocation(
            target="shop.tasks:ship", args=[7, "fast", {"gift": True}], kwargs={"notes": ["x"]}
        )
        retry = RetrySpec(
            kind=RetryKind.EXPONENTIAL,
            max_attempts=5,
            base_delay=timedelta(seconds=2),
            max_delay=timedelta(minutes=1),
            give_up_on=("shop.errors.OutOfStock",),
        )
        instance = make_instance(clock)
        store.workflows.create_instance(instance)
        requeued_from = new_id(clock)
        clock.advance(timedelta(seconds=1))
        job_id = enqueue(
            store,
            clock,
            queue="shipping",
            invocation=invocation,
            state=JobState.AWAITING,
            priority=4,
            retry=retry,
            timeout=timedelta(seconds=30),
            hard_timeout=timedelta(minutes=2),
            idempotency_key="ship-7",
            tenant_id="acme",
            parent_id=parent.id,
            requeued_from=requeued_from,
            recurring_id="nightly",
            workflow_instance_id=instance.id,
            activity_node_id="ship",
            expires_at=clock.now() + timedelta(hours=1),
        )
        created_at = clock.now()
        clock.advance(timedelta(seconds=1))
        claim_one(store, "w9", queues=["shipping"])
        assert store.jobs.try_cancel(job_id)
        details = job_details(store, job_id)
        assert details.summary == JobSummary(
            id=job_id,
            queue="shipping",
            state=JobState.PROCESSING,
            target="shop.tasks:ship",
            priority=4,
            created_at=created_at,
            due_at=None,
            finished_at=None,
            attempt=1,
            failures=0,
            tenant_id="acme",
            worker_id="w9",
            last_attempt_recorded=False,
            workflow_instance_id=instance.id,
            activity_node_id="ship",
            workflow_definition_id=instance.definition_id,
        )
        assert list(_query(store, queue="shipping").items) == [details.summary]
        assert details.invocation.target == invocation.target
        assert list(details.invocation.args) == [7, "fast", {"gift": True}]
        assert dict(details.invocation.kwargs) == {"notes": ["x"]}
        assert details.retry == retry
        assert details.timeout == timedelta(seconds=30)
        assert details.hard_timeout == timedelta(minutes=2)
        assert details.idempotency_key == "ship-7"
        assert details.parent_id == parent.id
        assert details.requeued_from == requeued_from
        assert details.recurring_id == "nightly"
        assert details.lease_until == clock.now() + LEASE
        assert details.cancel_requested is True
        assert details.expires_at == created_at + timedelta(hours=1)
        assert details.last_error is None
        assert list(details.attempts) == []
        assert list(details.continuations) == []

    def test_job_details_list_the_newest_continuations_as_summaries(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Job details list the job's continuations as summaries, newest first and capped."""
        parent = enqueue(store, clock, queue="parents")
        other = enqueue(store, clock, queue="parents")
        children: list[tuple[datetime, UUID]] = []
        for n in range(CONTINUATION_CAP + 2):
            clock.advance(timedelta(seconds=1))
            ids = (
                sorted([new_id(clock), new_id(clock)], reverse=True) if n == 5 else [new_id(clock)]
            )
            store.jobs.enqueue(
                [
                    make_job(clock, id=job_id, state=JobState.AWAITING, parent_id=parent)
                    for job_id in ids
                ]
            )
            children += [(clock.now(), job_id) for job_id in ids]
            enqueue(store, clock, state=JobState.AWAITING, parent_id=other)
        newest = [job_id for _, job_id in sorted(children, reverse=True)][:CONTINUATION_CAP]
        listed = job_details(store, parent).continuations
        assert [child.id for child in listed] == newest
        assert listed[0] == job_details(store, newest[0]).summary
        assert {child.state for child in listed} == {JobState.AWAITING}
        assert list(job_details(store, newest[0]).continuations) == []
        claimed = claim_one(store, queues=["parents"])
        assert claimed.id == parent
        assert store.jobs.apply(succeed(claimed, clock, activate_continuations=True))
        activated = job_details(store, parent).continuations
        assert [child.id for child in activated] == newest, "activated, still its continuations"
        assert {child.state for child in activated} == {JobState.ENQUEUED}
