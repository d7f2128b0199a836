"""Continuations: awaiting children follow their parent's outcome, whenever they were inserted."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from functools import partial
from typing import ClassVar, Literal
from uuid import UUID

import pytest

from millrace_django.clock import FakeClock
from millrace_django.conformance.harness import StoreUnderTest
from millrace_django.conformance.suite import FactGroup
from millrace_django.conformance.support import (
    assert_key_free,
    claim,
    claim_new,
    claim_one,
    die,
    enqueue,
    make_job,
    race,
    stored_job,
    succeed,
)
from millrace_django.contract import JobRecord, JobState
from millrace_django.errors import ParentJobNotFound

ParentOutcome = Literal["succeeds", "dies"]

CHILDREN_PER_INSERTER = 10


def _awaiting(store: StoreUnderTest, clock: FakeClock, parent_id: UUID, **fields: object) -> UUID:
    """Insert an awaiting continuation of ``parent_id`` and return its effective id."""
    child = make_job(clock, state=JobState.AWAITING, parent_id=parent_id, **fields)
    (child_id,) = store.jobs.enqueue([child])
    return child_id


def _assert_enqueued(store: StoreUnderTest, job_id: UUID) -> None:
    job = stored_job(store, job_id)
    assert job.state is JobState.ENQUEUED, f"job {job_id} is {job.state}"
    assert job.due_at is None
    assert job.worker_id is None
    assert job.lease_until is None
    assert job.finished_at is None
    assert job.attempt == 0


def _assert_cancelled(store: StoreUnderTest, job_id: UUID, clock: FakeClock) -> None:
    job = stored_job(store, job_id)
    assert job.state is JobState.CANCELLED, f"job {job_id} is {job.state}"
    assert job.finished_at == clock.now()
    assert job.worker_id is None
    assert job.lease_until is None
    assert job.attempt == 0


def _assert_key_free(store: StoreUnderTest, clock: FakeClock, key: str, old_id: UUID) -> None:
    """A fresh enqueue with ``key`` creates a new job keeping the key: nothing active holds it."""
    assert assert_key_free(store, clock, key, old_id).idempotency_key == key


class ContinuationFacts(FactGroup):
    heading: ClassVar[str] = "Continuations"

    def test_parent_success_activates_direct_awaiting_children_only(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """A succeeded parent's transition enqueues its awaiting children, not grandchildren."""
        parent = claim_new(store, clock, "parents")
        child_a = _awaiting(store, clock, parent.id, queue="children")
        child_b = _awaiting(store, clock, parent.id, queue="children")
        grandchild = _awaiting(store, clock, child_a, queue="children")
        bystander_parent = enqueue(store, clock, queue="elsewhere")
        bystander = _awaiting(store, clock, bystander_parent, queue="children")

        assert store.jobs.apply(succeed(parent, clock, activate_continuations=True)) is True

        _assert_enqueued(store, child_a)
        _assert_enqueued(store, child_b)
        assert stored_job(store, grandchild).state is JobState.AWAITING
        assert stored_job(store, bystander).state is JobState.AWAITING
        claimed = claim(store, "w2", queues=["children"], max_count=10)
        assert sorted(job.id for job in claimed) == sorted([child_a, child_b])

    def test_continuations_move_only_when_the_transition_asks_them_to(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """A terminal transition without the continuation flags leaves awaiting children be."""
        parent = claim_new(store, clock, "parents")
        child = _awaiting(store, clock, parent.id, queue="children")

        assert store.jobs.apply(succeed(parent, clock)) is True

        assert stored_job(store, child).state is JobState.AWAITING
        assert claim(store, "w2", queues=["children"], max_count=10) == []

    def test_parent_death_cancels_the_transitive_awaiting_closure_and_releases_keys(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """A dead parent cancels awaiting children and grandchildren and frees their keys."""
        parent = claim_new(store, clock, "parents")
        child = _awaiting(store, clock, parent.id, queue="children", idempotency_key="child")
        grandchild = _awaiting(store, clock, child, queue="children", idempotency_key="grand")
        great = _awaiting(store, clock, grandchild, queue="children", idempotency_key="great")
        clock.advance(timedelta(minutes=1))

        assert store.jobs.apply(die(parent, clock, error="parent broke")) is True

        dead = stored_job(store, parent.id)
        assert dead.state is JobState.DEAD
        assert dead.last_error == "parent broke"
        for job_id, key in ((child, "child"), (grandchild, "grand"), (great, "great")):
            _assert_cancelled(store, job_id, clock)
            assert stored_job(store, job_id).idempotency_key == key
            _assert_key_free(store, clock, key, job_id)
        assert claim(store, "w2", queues=["children"], max_count=10) == []

    def test_active_children_shield_their_descendants_from_the_cancel_cascade(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """The cascade stops at an active child; its awaiting children wait for its own end."""
        parent = claim_new(store, clock, "parents")
        active_child = enqueue(store, clock, queue="children", parent_id=parent.id)
        shielded = _awaiting(store, clock, active_child, queue="grandchildren")
        awaiting_child = _awaiting(store, clock, parent.id, queue="children")
        clock.advance(timedelta(minutes=1))

        assert store.jobs.apply(die(parent, clock)) is True

        _assert_cancelled(store, awaiting_child, clock)
        _assert_enqueued(store, active_child)
        assert stored_job(store, shielded).state is JobState.AWAITING
        child = claim_one(store, "w2", queues=["children"])
        assert child.id == active_child
        assert stored_job(store, shielded).state is JobState.AWAITING
        clock.advance(timedelta(minutes=1))
        assert store.jobs.apply(die(child, clock)) is True
        _assert_cancelled(store, shielded, clock)

    def test_an_awaiting_insert_after_parent_success_is_fixed_up_to_enqueued(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """An awaiting job whose parent already succeeded is stored enqueued and claimable."""
        parent = claim_new(store, clock, "parents")
        assert store.jobs.apply(succeed(parent, clock, activate_continuations=True)) is True
        clock.advance(timedelta(minutes=1))
        late = make_job(clock, queue="children", state=JobState.AWAITING, parent_id=parent.id)

        assert store.jobs.enqueue([late]) == [late.id]

        _assert_enqueued(store, late.id)
        assert stored_job(store, late.id).parent_id == parent.id
        assert claim_one(store, "w2", queues=["children"]).id == late.id

    def test_an_awaiting_insert_after_parent_death_is_fixed_up_to_cancelled(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """An awaiting job whose parent is dead is stored cancelled, finished, its key free."""
        parent = claim_new(store, clock, "parents")
        assert store.jobs.apply(die(parent, clock)) is True
        clock.advance(timedelta(minutes=1))
        late = make_job(
            clock,
            queue="children",
            state=JobState.AWAITING,
            parent_id=parent.id,
            idempotency_key="late",
        )

        assert store.jobs.enqueue([late]) == [late.id]

        _assert_cancelled(store, late.id, clock)
        assert stored_job(store, late.id).idempotency_key == "late"
        _assert_key_free(store, clock, "late", late.id)
        assert claim(store, "w2", queues=["children"]) == []

    def test_an_awaiting_insert_after_parent_cancellation_is_fixed_up_to_cancelled(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """An awaiting job whose parent was cancelled is stored cancelled, its key free."""
        parent_id = enqueue(store, clock, queue="parents")
        assert store.jobs.try_cancel(parent_id) is True
        clock.advance(timedelta(minutes=1))
        late = make_job(
            clock,
            queue="children",
            state=JobState.AWAITING,
            parent_id=parent_id,
            idempotency_key="late",
        )

        assert store.jobs.enqueue([late]) == [late.id]

        _assert_cancelled(store, late.id, clock)
        _assert_key_free(store, clock, "late", late.id)
        assert claim(store, "w2", queues=["children"]) == []

    def test_an_awaiting_insert_with_a_missing_parent_throws_and_rolls_back_the_batch(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """An orphan continuation raises ParentJobNotFound and no job of its batch is stored."""
        valid = make_job(clock, idempotency_key="valid")
        missing_parent = make_job(clock).id
        orphan = make_job(clock, state=JobState.AWAITING, parent_id=missing_parent)

        with pytest.raises(ParentJobNotFound) as raised:
            store.jobs.enqueue([valid, orphan])

        assert raised.value.parent_id == missing_parent
        assert store.jobs.get_job(valid.id) is None
        assert store.jobs.get_job(orphan.id) is None
        assert claim(store, "w1") == []
        _assert_key_free(store, clock, "valid", valid.id)

    @pytest.mark.parametrize("outcome", ["succeeds", "dies"])
    def test_awaiting_inserts_racing_the_parents_terminal_apply_never_strand_a_child(
        self, store: StoreUnderTest, clock: FakeClock, outcome: ParentOutcome
    ) -> None:
        """Children inserted while the parent finishes all end enqueued (success) or cancelled."""
        racers = self.contention.racers
        for round_no in range(self.contention.rounds):
            parent = claim_new(store, clock, "parents")
            queue = f"children-{outcome}-{round_no}"
            batches = [
                [
                    make_job(clock, queue=queue, state=JobState.AWAITING, parent_id=parent.id)
                    for _ in range(CHILDREN_PER_INSERTER)
                ]
                for _ in range(racers)
            ]
            finish = (
                succeed(parent, clock, activate_continuations=True)
                if outcome == "succeeds"
                else die(parent, clock)
            )

            def insert(children: list[JobRecord]) -> bool:
                for child in children:
                    assert store.jobs.enqueue([child]) == [child.id]
                return True

            actions: list[Callable[[], bool]] = [partial(insert, b) for b in batches]
            # Rotate the finisher through every start position: racers do not start together.
            actions.insert(round_no % (racers + 1), partial(store.jobs.apply, finish))
            results = race(store, actions)

            assert all(results), results
            for children in batches:
                for child in children:
                    if outcome == "succeeds":
                        _assert_enqueued(store, child.id)
                    else:
                        _assert_cancelled(store, child.id, clock)
            claimed = claim(store, "w2", queues=[queue], max_count=racers * CHILDREN_PER_INSERTER)
            expected = racers * CHILDREN_PER_INSERTER if outcome == "succeeds" else 0
            assert len(claimed) == expected
