"""Cancellation: pre-active jobs cancel at once; a running job only gets a flag."""

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
    LEASE,
    assert_key_free,
    claim,
    claim_one,
    enqueue,
    fail,
    make_job,
    race,
    stored_job,
    succeed,
    terminal,
    transition,
)
from millrace_django.contract import JobRecord, JobState
from millrace_django.ids import new_id


def _pre_active(store: StoreUnderTest, clock: FakeClock, state: JobState) -> UUID:
    """A job in ``state`` in queue ``target`` holding key ``k``."""
    if state is JobState.SCHEDULED:
        return enqueue(
            store,
            clock,
            queue="target",
            state=state,
            idempotency_key="k",
            due_at=clock.now() + timedelta(hours=1),
        )
    if state is JobState.AWAITING:
        parent = enqueue(store, clock, queue="parents")
        return enqueue(
            store, clock, queue="target", state=state, parent_id=parent, idempotency_key="k"
        )
    job_id = enqueue(store, clock, queue="target", idempotency_key="k")
    if state is JobState.FAILED:
        claimed = claim_one(store, "w1", queues=["target"])
        assert claimed.id == job_id
        assert store.jobs.apply(fail(claimed, clock, retry_in=timedelta(hours=1))) is True
    assert stored_job(store, job_id).state is state
    return job_id


class CancellationFacts(FactGroup):
    heading: ClassVar[str] = "Cancellation"

    @pytest.mark.parametrize(
        "state", [JobState.SCHEDULED, JobState.ENQUEUED, JobState.FAILED, JobState.AWAITING]
    )
    def test_try_cancel_of_a_pre_active_job_cancels_it_with_cascade_and_key_release(
        self, store: StoreUnderTest, clock: FakeClock, state: JobState
    ) -> None:
        """TryCancel of a pre-active job cancels it and its awaiting closure and frees keys."""
        job_id = _pre_active(store, clock, state)
        child = enqueue(
            store,
            clock,
            queue="children",
            state=JobState.AWAITING,
            parent_id=job_id,
            idempotency_key="child",
        )
        grandchild = enqueue(
            store,
            clock,
            queue="children",
            state=JobState.AWAITING,
            parent_id=child,
            idempotency_key="grandchild",
        )
        clock.advance(timedelta(minutes=1))

        assert store.jobs.try_cancel(job_id) is True

        for cancelled_id, key in ((job_id, "k"), (child, "child"), (grandchild, "grandchild")):
            cancelled = stored_job(store, cancelled_id)
            assert cancelled.state is JobState.CANCELLED, (cancelled_id, cancelled.state)
            assert cancelled.finished_at == clock.now()
            assert cancelled.worker_id is None
            assert cancelled.lease_until is None
            assert cancelled.idempotency_key == key
            assert_key_free(store, clock, key, cancelled_id)
        parent_id = stored_job(store, job_id).parent_id
        if parent_id is not None:
            assert stored_job(store, parent_id).state is JobState.ENQUEUED
        clock.advance(timedelta(hours=2))
        assert store.jobs.activate_due(clock.now(), 100) == 0
        assert claim(store, "w2", queues=["target", "children"], max_count=10) == []
        assert stored_job(store, job_id).state is JobState.CANCELLED

    def test_try_cancel_of_a_processing_job_sets_the_flag_only_and_never_blocks_the_fence(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """A running job keeps running flagged; renewal omits it yet extends; its apply wins."""
        job_id = enqueue(store, clock, idempotency_key="k")
        claimed = claim_one(store, "w1")
        claimed_at = clock.now()
        clock.advance(timedelta(minutes=1))

        assert store.jobs.try_cancel(job_id) is True

        flagged = stored_job(store, job_id)
        assert flagged.state is JobState.PROCESSING
        assert flagged.cancel_requested is True
        assert flagged.worker_id == "w1"
        assert flagged.attempt == 1
        assert flagged.lease_until == claimed.lease_until
        assert flagged.finished_at is None
        offered = make_job(clock, idempotency_key="k")
        assert store.jobs.enqueue([offered]) == [job_id]
        assert store.jobs.get_job(offered.id) is None

        clock.advance(timedelta(minutes=3))
        assert clock.now() == claimed_at + timedelta(minutes=4)
        assert store.jobs.renew_leases("w1", [job_id], LEASE) == set()
        renewed = stored_job(store, job_id)
        assert renewed.lease_until == clock.now() + LEASE
        assert renewed.state is JobState.PROCESSING
        clock.advance(timedelta(minutes=2))
        assert clock.now() > claimed_at + LEASE
        assert claim(store, "w2") == []

        assert store.jobs.apply(succeed(claimed, clock)) is True
        done = stored_job(store, job_id)
        assert done.state is JobState.SUCCEEDED
        assert done.finished_at == clock.now()
        assert done.worker_id is None
        assert done.lease_until is None

    def test_try_cancel_racing_a_fenced_apply_yields_exactly_one_terminal_outcome(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Cancels racing the worker's succeeded apply never revert or replace its outcome."""
        racers = self.contention.racers
        for round_no in range(self.contention.rounds):
            job_id = enqueue(store, clock)
            claimed = claim_one(store, "w1")
            assert claimed.id == job_id
            actions: list[Callable[[], bool]] = [
                partial(store.jobs.try_cancel, job_id) for _ in range(racers - 1)
            ]
            position = round_no % racers  # every start position, as racers start staggered
            actions.insert(position, partial(store.jobs.apply, succeed(claimed, clock)))

            results = race(store, actions)

            assert results[position] is True
            done = stored_job(store, job_id)
            assert done.state is JobState.SUCCEEDED
            assert done.finished_at == clock.now()
            assert done.worker_id is None
            assert done.lease_until is None
            assert store.jobs.try_cancel(job_id) is False
            assert stored_job(store, job_id) == done
            clock.advance(timedelta(seconds=1))

    def test_try_cancel_racing_activation_and_claim_yields_exactly_one_owner(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """A cancel racing activation and claims of a due retry either wins or flags the owner."""
        racers = self.contention.racers
        for round_no in range(self.contention.rounds):
            job_id = enqueue(store, clock)
            first = claim_one(store, "w1")
            assert first.id == job_id
            assert store.jobs.apply(fail(first, clock, retry_in=timedelta(minutes=1))) is True
            clock.advance(timedelta(minutes=2))

            def activate_and_claim(worker: str) -> list[JobRecord]:
                store.jobs.activate_due(clock.now(), 10)
                return claim(store, worker)

            actions: list[Callable[[], list[JobRecord] | bool]] = [
                partial(activate_and_claim, f"w{n}") for n in range(2, racers + 1)
            ]
            position = round_no % racers  # every start position, as racers start staggered
            actions.insert(position, partial(store.jobs.try_cancel, job_id))

            results = race(store, actions)

            cancelled = results.pop(position)
            assert cancelled is True
            claims = [job for result in results if isinstance(result, list) for job in result]
            assert len(claims) <= 1, claims
            current = stored_job(store, job_id)
            if claims:
                (owner,) = claims
                assert owner.id == job_id
                assert owner.attempt == 2
                assert current.state is JobState.PROCESSING
                assert current.worker_id == owner.worker_id
                assert current.attempt == 2
                assert current.cancel_requested is True
                assert store.jobs.apply(succeed(owner, clock)) is True
                assert stored_job(store, job_id).state is JobState.SUCCEEDED
            else:
                assert current.state is JobState.CANCELLED
                assert current.finished_at == clock.now()
                assert current.worker_id is None
                assert store.jobs.activate_due(clock.now(), 10) == 0
                assert claim(store, "w9") == []
                assert stored_job(store, job_id).state is JobState.CANCELLED

    def test_try_cancel_of_terminal_and_unknown_jobs_returns_false_without_mutation(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """TryCancel of a succeeded, dead, cancelled or unknown job is False and changes nothing."""
        finished: list[UUID] = []
        for target in (JobState.SUCCEEDED, JobState.DEAD):
            job_id = enqueue(store, clock, idempotency_key=f"key-{target}")
            claimed = claim_one(store, "w1")
            assert store.jobs.apply(terminal(claimed, clock, target)) is True
            finished.append(job_id)
        by_request = enqueue(store, clock, idempotency_key="by-request")
        assert store.jobs.try_cancel(by_request) is True
        finished.append(by_request)
        by_worker = enqueue(store, clock, idempotency_key="by-worker")
        claimed = claim_one(store, "w1")
        assert claimed.id == by_worker
        cancel = transition(claimed, JobState.CANCELLED, finished_at=clock.now(), error="stop")
        assert store.jobs.apply(cancel) is True
        finished.append(by_worker)
        snapshots = {job_id: stored_job(store, job_id) for job_id in finished}
        clock.advance(timedelta(hours=1))

        for job_id in finished:
            assert store.jobs.try_cancel(job_id) is False
            assert stored_job(store, job_id) == snapshots[job_id]
        unknown = new_id(clock)
        assert store.jobs.try_cancel(unknown) is False
        assert store.jobs.get_job(unknown) is None
        assert claim(store, "w2", max_count=10) == []
