"""Workflow instance queries: newest first, keyset-paged, filtered like job queries."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from millrace_django.clock import FakeClock
from millrace_django.conformance.harness import StoreUnderTest
from millrace_django.conformance.suite import FactGroup
from millrace_django.conformance.support import ids_of, make_instance, recurring_cursor
from millrace_django.contract import (
    InstanceQuery,
    InstanceState,
    InstanceSummary,
    Page,
    TenantFilter,
    WorkflowInstanceRecord,
)
from millrace_django.errors import InvalidCursor


def _query(store: StoreUnderTest, **fields: Any) -> Page[InstanceSummary]:
    return store.monitoring.query_instances(InstanceQuery(**fields))


def _start(store: StoreUnderTest, clock: FakeClock, **fields: Any) -> WorkflowInstanceRecord:
    """A new instance, created one second after the previous one."""
    clock.advance(timedelta(seconds=1))
    instance = make_instance(clock, **fields)
    store.workflows.create_instance(instance)
    return instance


def _move(
    store: StoreUnderTest, clock: FakeClock, instance: WorkflowInstanceRecord, **fields: Any
) -> WorkflowInstanceRecord:
    """Checkpoint ``instance`` (stored at revision 1) to revision 2 with ``fields``."""
    clock.advance(timedelta(seconds=1))
    moved = replace(instance, revision=1, updated_at=clock.now(), **fields)
    store.workflows.update_instance(moved, 1)
    return replace(moved, revision=2)


class InstanceQueryFacts(FactGroup):
    heading = "Workflow instance queries"

    def test_instance_queries_page_and_filter_like_job_queries(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Instance queries page and filter like job queries."""
        started = [
            _start(store, clock, definition_id=definition, revision=9)
            for definition in ("order", "invoice", "order", "order", "invoice")
        ]
        orders = [replace(i, revision=1) for i in started if i.definition_id == "order"][::-1]
        first = _query(store, definition_id="order", limit=2)
        assert list(first.items) == [InstanceSummary.of(i) for i in orders[:2]]
        assert first.next_cursor is not None
        second = _query(store, definition_id="order", limit=2, cursor=first.next_cursor)
        assert list(second.items) == [InstanceSummary.of(orders[2])]
        assert second.next_cursor is None
        assert ids_of(_query(store)) == [i.id for i in started[::-1]]
        moved = _move(store, clock, orders[0], data={"step": 1})
        assert list(_query(store, definition_id="order", limit=1).items) == [
            InstanceSummary.of(moved)
        ]
        range_page = _query(
            store, created_after=started[1].created_at, created_before=started[3].created_at
        )
        assert ids_of(range_page) == [started[2].id, started[1].id]

    def test_instance_version_filter_requires_a_definition_id(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Instance version filter requires a definition id."""
        order_v1 = _start(store, clock, definition_id="order", definition_version=1)
        order_v2 = _start(store, clock, definition_id="order", definition_version=2)
        invoice_v2 = _start(store, clock, definition_id="invoice", definition_version=2)
        everything = [invoice_v2.id, order_v2.id, order_v1.id]
        assert ids_of(_query(store, definition_version=1)) == everything
        assert ids_of(_query(store, definition_id="order", definition_version=2)) == [order_v2.id]
        assert ids_of(_query(store, definition_id="order")) == [order_v2.id, order_v1.id]
        assert ids_of(_query(store, definition_id="order", definition_version=3)) == []
        assert ids_of(_query(store, definition_id="refund")) == []

    def test_instance_state_filter_selects_only_those_states(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Instance state filter selects only those states; an empty set means any."""
        made = {state: _start(store, clock) for state in InstanceState}
        for state, instance in made.items():
            if state is not InstanceState.RUNNING:
                _move(store, clock, instance, state=state)
        newest_first = list(made.items())[::-1]
        for chosen in (
            {InstanceState.COMPLETED, InstanceState.SUSPENDED},
            {InstanceState.RUNNING},
            {InstanceState.FAILED, InstanceState.COMPENSATED, InstanceState.CANCELLED},
        ):
            page = _query(store, states=frozenset(chosen))
            assert ids_of(page) == [i.id for state, i in newest_first if state in chosen]
            assert {item.state for item in page.items} == chosen
        assert ids_of(_query(store, states=frozenset())) == [i.id for _, i in newest_first]

    def test_instance_tenant_filter_distinguishes_any_from_untenanted(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Instance tenant filter distinguishes any from untenanted."""
        started = [
            _start(store, clock, tenant_id=tenant) for tenant in (None, "acme", None, "globex")
        ]
        newest_first = started[::-1]
        assert ids_of(_query(store, tenant=TenantFilter.any())) == [i.id for i in newest_first]
        assert ids_of(_query(store, tenant=TenantFilter.untenanted())) == [
            i.id for i in newest_first if i.tenant_id is None
        ]
        assert ids_of(_query(store, tenant=TenantFilter.of("acme"))) == [started[1].id]
        assert ids_of(_query(store, tenant=TenantFilter.of("initech"))) == []

    @pytest.mark.parametrize("cursor", ["not-a-cursor", "%%%", ""])
    def test_instance_queries_reject_an_undecodable_cursor(
        self, store: StoreUnderTest, clock: FakeClock, cursor: str
    ) -> None:
        """Instance queries reject an undecodable cursor."""
        _start(store, clock)
        _start(store, clock)
        with pytest.raises(InvalidCursor):
            _query(store, cursor=cursor, limit=1)

    def test_a_recurring_cursor_is_rejected_by_the_instance_query(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """A cursor of the recurring query is rejected by the instance query."""
        _start(store, clock)
        _start(store, clock)
        cursor = recurring_cursor(store, clock)
        with pytest.raises(InvalidCursor):
            _query(store, cursor=cursor, limit=1)
