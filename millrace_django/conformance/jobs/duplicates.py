"""Duplicate policies: what an insert does when an active job holds its key."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from functools import partial
from typing import ClassVar
from uuid import UUID

import pytest

from millrace_django.clock import FakeClock
from millrace_django.conformance.harness import StoreUnderTest
from millrace_django.conformance.suite import FactGroup
from millrace_django.conformance.support import (
    claim,
    claim_one,
    enqueue,
    fail,
    make_job,
    race,
    stored_job,
    succeed,
)
from millrace_django.contract import DuplicatePolicy, Invocation, JobState
from millrace_django.errors import IdempotencyKeyHeld

REJECT, REPLACE = DuplicatePolicy.REJECT, DuplicatePolicy.REPLACE


def _call(*args: int) -> Invocation:
    return Invocation(target="conformance.dummy:run", args=list(args))


def _offer_or_error(store: StoreUnderTest, job: object) -> UUID | IdempotencyKeyHeld:
    """The id an enqueue of ``job`` answers, or the error it raises for its key."""
    try:
        (effective,) = store.jobs.enqueue([job])  # type: ignore[list-item]
    except IdempotencyKeyHeld as error:
        return error
    return effective


class DuplicatePolicyFacts(FactGroup):
    heading: ClassVar[str] = "Duplicate policies"

    def test_reject_raises_with_the_holders_id_and_stores_nothing(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """A held key refuses the whole batch, naming the holder; the holder is untouched."""
        holder = enqueue(store, clock, idempotency_key="k", invocation=_call(1))
        before = stored_job(store, holder)
        other = make_job(clock)
        offer = make_job(clock, idempotency_key="k", invocation=_call(2), on_duplicate=REJECT)
        with pytest.raises(IdempotencyKeyHeld) as raised:
            store.jobs.enqueue([other, offer])
        assert (raised.value.holder_id, raised.value.key) == (holder, "k")
        assert store.jobs.get_job(offer.id) is None
        assert store.jobs.get_job(other.id) is None
        assert stored_job(store, holder) == before

    def test_a_policy_inserts_as_usual_when_the_key_is_free(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """No active holder (none yet, or it ended): reject and replace insert the job."""
        for policy in (REJECT, REPLACE):
            fields = {
                "idempotency_key": f"free-{policy}",
                "on_duplicate": policy,
                "queue": str(policy),
            }
            offer = make_job(clock, **fields)
            assert store.jobs.enqueue([offer]) == [offer.id]
            job = claim_one(store, queues=[str(policy)])
            assert store.jobs.apply(succeed(job, clock)) is True
            again = make_job(clock, **fields)
            assert store.jobs.enqueue([again]) == [again.id]
            assert stored_job(store, again.id).state is JobState.ENQUEUED

    def test_replace_gives_a_pending_holder_the_new_arguments_and_due_time(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """A scheduled holder takes the new call and due time, keeping its id and options.

        Its position answers its id; a second replace with an enqueued job makes it
        enqueued."""
        later = clock.now() + timedelta(hours=1)
        holder = enqueue(
            store,
            clock,
            state=JobState.SCHEDULED,
            due_at=later,
            idempotency_key="k",
            invocation=_call(1),
            priority=5,
        )
        sooner = clock.now() + timedelta(minutes=5)
        offer = make_job(
            clock,
            state=JobState.SCHEDULED,
            due_at=sooner,
            idempotency_key="k",
            invocation=_call(2),
            on_duplicate=REPLACE,
        )
        assert store.jobs.enqueue([offer]) == [holder]
        assert store.jobs.get_job(offer.id) is None
        stored = stored_job(store, holder)
        assert (stored.state, stored.due_at, list(stored.invocation.args)) == (
            JobState.SCHEDULED,
            sooner,
            [2],
        )
        assert stored.priority == 5

        now = make_job(clock, idempotency_key="k", invocation=_call(3), on_duplicate=REPLACE)
        assert store.jobs.enqueue([now]) == [holder]
        claimed = claim_one(store)
        assert claimed.id == holder
        assert list(claimed.invocation.args) == [3]
        assert claimed.due_at is None

    def test_replace_rewrites_a_holder_waiting_for_its_retry_and_keeps_its_counts(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """A failed holder runs the new call now; its attempts and failures stay."""
        holder = enqueue(store, clock, idempotency_key="k", invocation=_call(1))
        first = claim_one(store)
        assert store.jobs.apply(fail(first, clock, retry_in=timedelta(hours=1))) is True
        offer = make_job(clock, idempotency_key="k", invocation=_call(2), on_duplicate=REPLACE)
        assert store.jobs.enqueue([offer]) == [holder]
        second = claim_one(store)
        assert (second.id, second.attempt, second.failures) == (holder, 2, 1)
        assert list(second.invocation.args) == [2]

    def test_replace_refuses_a_holder_that_has_started(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """A processing holder is not rewritten: the error names it, nothing changes."""
        holder = enqueue(store, clock, idempotency_key="k", invocation=_call(1))
        running = claim_one(store)
        offer = make_job(clock, idempotency_key="k", invocation=_call(2), on_duplicate=REPLACE)
        with pytest.raises(IdempotencyKeyHeld) as raised:
            store.jobs.enqueue([offer])
        assert raised.value.holder_id == holder
        assert store.jobs.get_job(offer.id) is None
        assert stored_job(store, holder) == running

    def test_a_replace_racing_the_holders_claim_never_rewrites_a_started_job(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """A replace racing the holder's claim comes first or raises: never after the claim.

        Coming first, the claim runs the new call."""
        for round_no in range(self.contention.rounds):
            queue, key = f"claimed-{round_no}", f"claimed-{round_no}"
            holder = enqueue(store, clock, queue=queue, idempotency_key=key, invocation=_call(0))
            offer = make_job(
                clock, queue=queue, idempotency_key=key, invocation=_call(1), on_duplicate=REPLACE
            )
            actions: list[Callable[[], object]] = [
                partial(_offer_or_error, store, offer),
                partial(claim, store, "w1", queues=[queue]),
            ]

            answer, claimed = race(store, actions)

            assert isinstance(claimed, list)
            stored = list(stored_job(store, holder).invocation.args)
            if isinstance(answer, IdempotencyKeyHeld):  # the claim came first
                assert [list(job.invocation.args) for job in claimed] == [[0]]
                assert stored == [0]
            else:  # the replace came first (a claim may skip the row it locks)
                assert answer == holder
                assert stored == [1]
                assert [list(job.invocation.args) for job in claimed] in ([], [[1]])

    def test_racers_with_reject_leave_one_holder_and_the_others_its_id_on_the_error(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Racers rejecting one free key: one inserts, the others get the error with its id."""
        self._race(store, clock, REJECT)

    def test_racers_with_replace_all_answer_the_one_holder(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Racers replacing one free key: one inserts, the others rewrite it and get its id.

        The job stored holds one of the racers' calls."""
        self._race(store, clock, REPLACE)

    def _race(self, store: StoreUnderTest, clock: FakeClock, policy: DuplicatePolicy) -> None:
        racers = self.contention.racers
        for round_no in range(self.contention.rounds):
            key = f"race-{policy}-{round_no}"
            offers = [
                make_job(clock, idempotency_key=key, invocation=_call(n), on_duplicate=policy)
                for n in range(racers)
            ]
            actions: list[Callable[[], UUID | IdempotencyKeyHeld]] = [
                partial(_offer_or_error, store, offer) for offer in offers
            ]

            answers = race(store, actions)

            stored = [offer for offer in offers if store.jobs.get_job(offer.id) is not None]
            assert len(stored) == 1, answers
            (holder,) = stored
            ids = {a.holder_id if isinstance(a, IdempotencyKeyHeld) else a for a in answers}
            assert ids == {holder.id}, answers
            errors = sum(isinstance(a, IdempotencyKeyHeld) for a in answers)
            assert errors == (racers - 1 if policy is REJECT else 0), answers
            kept = stored_job(store, holder.id)
            assert kept.state is JobState.ENQUEUED
            assert list(kept.invocation.args) in [[n] for n in range(racers)]
