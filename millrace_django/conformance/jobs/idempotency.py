"""Idempotency keys: one active job per (tenant, key), released by any terminal outcome."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from functools import partial
from typing import ClassVar
from uuid import UUID

from millrace_django.clock import FakeClock
from millrace_django.conformance.harness import StoreUnderTest
from millrace_django.conformance.suite import FactGroup
from millrace_django.conformance.support import (
    claim_one,
    enqueue,
    fail,
    make_job,
    race,
    stored_job,
    succeed,
    terminal,
)
from millrace_django.contract import JobRecord, JobState


def _enqueue_with_key(
    store: StoreUnderTest, clock: FakeClock, key: str, **fields: object
) -> tuple[JobRecord, UUID]:
    """Offer a fresh job with ``key``; return the offered record and the effective id."""
    job = make_job(clock, idempotency_key=key, **fields)
    (effective,) = store.jobs.enqueue([job])
    return job, effective


def _assert_deduped(
    store: StoreUnderTest, clock: FakeClock, key: str, holder: UUID, **fields: object
) -> None:
    offered, effective = _enqueue_with_key(store, clock, key, **fields)
    assert effective == holder
    assert store.jobs.get_job(offered.id) is None


def _assert_inserted(store: StoreUnderTest, clock: FakeClock, key: str, **fields: object) -> UUID:
    offered, effective = _enqueue_with_key(store, clock, key, **fields)
    assert effective == offered.id
    stored = stored_job(store, offered.id)
    assert stored.state is JobState.ENQUEUED
    assert stored.idempotency_key == key
    return offered.id


class IdempotencyFacts(FactGroup):
    heading: ClassVar[str] = "Idempotency keys"

    def test_a_duplicate_active_key_is_a_noop_returning_the_holders_id(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """While its holder is in any active state a key dedupes, across queues, to the holder."""
        scheduled = enqueue(
            store,
            clock,
            queue="later",
            state=JobState.SCHEDULED,
            due_at=clock.now() + timedelta(hours=1),
            idempotency_key="scheduled",
        )
        parent = enqueue(store, clock, queue="parents")
        awaiting = enqueue(
            store,
            clock,
            queue="children",
            state=JobState.AWAITING,
            parent_id=parent,
            idempotency_key="awaiting",
        )
        holder = enqueue(store, clock, idempotency_key="k")
        before = stored_job(store, holder)

        _assert_deduped(store, clock, "scheduled", scheduled)
        _assert_deduped(store, clock, "awaiting", awaiting, queue="other")
        _assert_deduped(store, clock, "k", holder)
        _assert_deduped(store, clock, "k", holder, queue="other", priority=9)
        assert stored_job(store, holder) == before

        claimed = claim_one(store, "w1")
        assert claimed.id == holder
        _assert_deduped(store, clock, "k", holder)
        assert store.jobs.apply(fail(claimed, clock, retry_in=timedelta(minutes=5))) is True
        assert stored_job(store, holder).state is JobState.FAILED
        _assert_deduped(store, clock, "k", holder)
        held = stored_job(store, holder)
        assert held.queue == "default"
        assert held.priority == 0

    def test_concurrent_same_key_enqueues_yield_exactly_one_job(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Racers enqueuing one key all get the same id, and only that job is stored."""
        racers = self.contention.racers
        for round_no in range(self.contention.rounds):
            key = f"race-{round_no}"
            offers = [make_job(clock, idempotency_key=key) for _ in range(racers)]
            actions: list[Callable[[], list[UUID]]] = [
                partial(store.jobs.enqueue, [offer]) for offer in offers
            ]

            results = race(store, actions)

            ids = {effective for (effective,) in results}
            assert len(ids) == 1, results
            (winner,) = ids
            assert winner in {offer.id for offer in offers}
            for offer in offers:
                if offer.id != winner:
                    assert store.jobs.get_job(offer.id) is None
            assert stored_job(store, winner).state is JobState.ENQUEUED
            _assert_deduped(store, clock, key, winner)

    def test_key_uniqueness_is_scoped_per_tenant_with_null_as_its_own_scope(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """One key is distinct per tenant and in the shared untenanted scope, deduping within."""
        for_a = _assert_inserted(store, clock, "k", tenant_id="a")
        for_b = _assert_inserted(store, clock, "k", tenant_id="b")
        untenanted = _assert_inserted(store, clock, "k")

        assert len({for_a, for_b, untenanted}) == 3
        _assert_deduped(store, clock, "k", for_a, tenant_id="a")
        _assert_deduped(store, clock, "k", for_b, tenant_id="b")
        _assert_deduped(store, clock, "k", untenanted)
        assert stored_job(store, for_a).tenant_id == "a"
        assert stored_job(store, for_b).tenant_id == "b"
        assert stored_job(store, untenanted).tenant_id is None

    def test_a_terminal_transition_frees_the_key_but_retains_the_field(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Succeeded, dead and cancelled jobs keep their key field yet no longer hold the key."""
        for target in (JobState.SUCCEEDED, JobState.DEAD, JobState.CANCELLED):
            key = f"key-{target}"
            old = enqueue(store, clock, idempotency_key=key)
            claimed = claim_one(store, "w1")
            assert claimed.id == old

            assert store.jobs.apply(terminal(claimed, clock, target)) is True

            finished = stored_job(store, old)
            assert finished.state is target
            assert finished.idempotency_key == key
            assert finished.finished_at == clock.now()
            successor = _assert_inserted(store, clock, key, queue="successors")
            assert successor != old
            _assert_deduped(store, clock, key, successor)
            assert stored_job(store, old).state is target

    def test_enqueue_racing_terminal_release_always_returns_a_valid_id(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Enqueues racing the holder's release return its id or one new holder's, never more."""
        racers = self.contention.racers
        for round_no in range(self.contention.rounds):
            key = f"release-{round_no}"
            holder = enqueue(store, clock, idempotency_key=key)
            claimed = claim_one(store, "w1")
            assert claimed.id == holder
            offers = [
                make_job(clock, queue="contenders", idempotency_key=key) for _ in range(racers - 1)
            ]
            actions: list[Callable[[], object]] = [
                partial(store.jobs.enqueue, [offer]) for offer in offers
            ]
            actions.insert(round_no % racers, partial(store.jobs.apply, succeed(claimed, clock)))

            results = race(store, actions)

            applied = results.pop(round_no % racers)
            assert applied is True
            effective = [result[0] for result in results if isinstance(result, list)]
            assert len(effective) == len(offers)
            offered = {offer.id for offer in offers}
            assert set(effective) <= offered | {holder}, effective
            stored = [offer.id for offer in offers if store.jobs.get_job(offer.id) is not None]
            assert len(stored) <= 1, stored
            assert set(effective) - {holder} == set(stored), (effective, stored)
            assert stored_job(store, holder).state is JobState.SUCCEEDED
            if stored:
                assert stored_job(store, stored[0]).state is JobState.ENQUEUED
                _assert_deduped(store, clock, key, stored[0])
            else:
                _assert_inserted(store, clock, key, queue="contenders")

    def test_an_apply_insert_with_a_duplicate_active_key_is_skipped_as_a_noop(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """A transition's insert whose key is held is skipped; the rest of it commits."""
        holder = enqueue(store, clock, queue="held", idempotency_key="k")
        before = stored_job(store, holder)
        worker_job = enqueue(store, clock)
        claimed = claim_one(store, "w1")
        assert claimed.id == worker_job
        duplicate = make_job(clock, queue="successors", idempotency_key="k")
        fresh = make_job(clock, queue="successors", idempotency_key="other")

        assert store.jobs.apply(succeed(claimed, clock, enqueue=[duplicate, fresh])) is True

        assert stored_job(store, worker_job).state is JobState.SUCCEEDED
        assert store.jobs.get_job(duplicate.id) is None
        assert stored_job(store, fresh.id).state is JobState.ENQUEUED
        assert stored_job(store, holder) == before
        _assert_deduped(store, clock, "k", holder)

    def test_a_terminal_key_release_is_visible_to_the_same_transitions_inserts(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """A job finishing with key K can insert its successor with K in the same transition."""
        old = enqueue(store, clock, idempotency_key="k")
        claimed = claim_one(store, "w1")
        assert claimed.id == old
        successor = make_job(clock, queue="successors", idempotency_key="k", requeued_from=old)

        assert store.jobs.apply(succeed(claimed, clock, enqueue=[successor])) is True

        finished = stored_job(store, old)
        assert finished.state is JobState.SUCCEEDED
        assert finished.idempotency_key == "k"
        inserted = stored_job(store, successor.id)
        assert inserted.state is JobState.ENQUEUED
        assert inserted.idempotency_key == "k"
        assert inserted.requeued_from == old
        _assert_deduped(store, clock, "k", successor.id)
