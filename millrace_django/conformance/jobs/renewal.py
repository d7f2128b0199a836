"""Lease renewal: a heartbeat keeps a job, a lost lease is never renewed back."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from functools import partial
from typing import ClassVar

from millrace_django.clock import FakeClock
from millrace_django.conformance.harness import StoreUnderTest
from millrace_django.conformance.suite import FactGroup
from millrace_django.conformance.support import (
    LEASE,
    as_json,
    assert_same_invocation,
    claim,
    claim_one,
    enqueue,
    make_instance,
    make_job,
    race,
    stored_job,
    succeed,
)
from millrace_django.contract import (
    Invocation,
    JobRecord,
    JobState,
    RetryKind,
    RetrySpec,
)
from millrace_django.ids import new_id


def _assert_same_job(got: JobRecord, expected: JobRecord) -> None:
    """Every field of ``got`` equals ``expected``; JSON compared semantically."""
    assert got.id == expected.id
    assert got.queue == expected.queue
    assert got.state is expected.state
    assert got.created_at == expected.created_at
    assert got.priority == expected.priority
    assert got.due_at == expected.due_at
    assert got.worker_id == expected.worker_id
    assert got.lease_until == expected.lease_until
    assert got.attempt == expected.attempt
    assert got.failures == expected.failures
    assert got.cancel_requested is expected.cancel_requested
    assert got.retry == expected.retry
    assert got.retry.kind is expected.retry.kind
    assert got.timeout == expected.timeout
    assert got.hard_timeout == expected.hard_timeout
    assert got.idempotency_key == expected.idempotency_key
    assert got.tenant_id == expected.tenant_id
    assert got.parent_id == expected.parent_id
    assert got.requeued_from == expected.requeued_from
    assert got.trace_parent == expected.trace_parent
    assert got.recurring_id == expected.recurring_id
    assert got.last_error == expected.last_error
    assert as_json(got.result) == as_json(expected.result)
    assert got.finished_at == expected.finished_at
    assert got.workflow_instance_id == expected.workflow_instance_id
    assert got.activity_node_id == expected.activity_node_id
    assert got.expires_at == expected.expires_at
    assert_same_invocation(got.invocation, expected.invocation)
    for instant in (got.created_at, got.due_at):
        assert instant is None or instant.utcoffset() == timedelta(0), "times must be aware UTC"


class RenewalFacts(FactGroup):
    heading: ClassVar[str] = "Lease renewal"

    def test_renew_extends_lease_beyond_original_expiry(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Renewal sets lease_until = now + lease, keeping the job past its original expiry."""
        job_id = enqueue(store, clock)
        claim_one(store, "w1")
        clock.advance(timedelta(minutes=4))

        assert store.jobs.renew_leases("w1", [job_id], LEASE) == {job_id}
        renewed_until = clock.now() + LEASE
        assert stored_job(store, job_id).lease_until == renewed_until

        clock.advance(timedelta(minutes=2))
        assert claim(store, "w2") == []
        clock.set(renewed_until - timedelta(seconds=1))
        assert claim(store, "w2") == []
        stored = stored_job(store, job_id)
        assert stored.state is JobState.PROCESSING
        assert stored.worker_id == "w1"
        assert stored.attempt == 1

        clock.set(renewed_until)
        assert claim_one(store, "w2").attempt == 2

    def test_renew_resurrects_expired_but_unreclaimed_lease(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Renewal ignores lease_until: an expired lease nobody reclaimed is renewed."""
        job_id = enqueue(store, clock)
        claim_one(store, "w1")
        clock.advance(LEASE + timedelta(minutes=1))

        assert store.jobs.renew_leases("w1", [job_id], LEASE) == {job_id}
        assert claim(store, "w2") == []
        stored = stored_job(store, job_id)
        assert stored.state is JobState.PROCESSING
        assert stored.worker_id == "w1"
        assert stored.attempt == 1
        assert stored.lease_until == clock.now() + LEASE

    def test_renewal_racing_reclaim_has_exactly_one_owner(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Renewal racing reclaim of an expired lease: renewal wins alone, or one claim does."""
        racers = self.contention.racers
        for round_number in range(self.contention.rounds):
            job_id = enqueue(store, clock)
            claim_one(store, "w1")
            clock.advance(LEASE + timedelta(seconds=1))
            # Roles alternate, and which role leads flips every round: where threads do not
            # start together, either side still gets to read first.
            roles = [(position + round_number) % 2 == 0 for position in range(racers)]
            actions: list[Callable[[], object]] = [
                partial(store.jobs.renew_leases, "w1", [job_id], LEASE)
                if renews
                else partial(claim, store, f"thief{position}")
                for position, renews in enumerate(roles)
            ]
            outcomes = race(store, actions)

            renewed = 0
            claimed: list[JobRecord] = []
            for renews, result in zip(roles, outcomes, strict=True):
                if renews:
                    assert result in (set(), {job_id}), f"renewal returned {result!r}"
                    renewed += bool(result)
                else:
                    claimed += _claimed(result)
            stored = stored_job(store, job_id)
            assert stored.state is JobState.PROCESSING
            if claimed:
                assert len(claimed) == 1, "two workers reclaimed the same lease"
                assert renewed == 0, "a renewal succeeded for a lease another worker took"
                assert stored.worker_id == claimed[0].worker_id
                assert stored.attempt == 2
            else:
                assert renewed >= 1, "nobody owns the job after the race"
                assert stored.worker_id == "w1"
                assert stored.attempt == 1
            assert stored.lease_until == clock.now() + LEASE
            # Finish the round's job so the next round claims a fresh one.
            assert store.jobs.apply(succeed(stored, clock))

    def test_get_job_roundtrips_every_field(self, store: StoreUnderTest, clock: FakeClock) -> None:
        """GetJob returns every stored field exactly (unset ones unset); unknown ids read None."""
        parent_id = enqueue(store, clock)
        instance = make_instance(clock)
        store.workflows.create_instance(instance)
        clock.advance(timedelta(seconds=17))
        full = make_job(
            clock,
            queue="reports-émoji-✓",
            invocation=Invocation(
                target="billing.tasks:send_invoice",
                args=[42, -7.25, "Zoë ✓ 日本", None, True, [1, [2, {"x": "y"}]], {"k": []}],
                kwargs={"customer": {"id": 9, "tags": ["a", "b"]}, "dry_run": False, "n": 2.5},
            ),
            state=JobState.SCHEDULED,
            created_at=clock.now() - timedelta(seconds=3),
            priority=-12,
            due_at=clock.now() + timedelta(hours=2, minutes=5),
            retry=RetrySpec(
                kind=RetryKind.EXPONENTIAL,
                max_attempts=7,
                base_delay=timedelta(seconds=3),
                max_delay=timedelta(minutes=45),
                jitter=True,
                retry_on=("builtins.ConnectionError", "billing.errors.Gateway.Busy"),
                give_up_on=("builtins.ConnectionRefusedError",),
            ),
            timeout=timedelta(minutes=2, seconds=30),
            hard_timeout=timedelta(minutes=5, microseconds=250),
            idempotency_key="invoice-2026-01",
            tenant_id="tenant-ä",
            parent_id=parent_id,
            requeued_from=parent_id,
            trace_parent="00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            recurring_id="nightly-invoices",
            workflow_instance_id=instance.id,
            activity_node_id="charge-card",
            expires_at=clock.now() + timedelta(hours=3, microseconds=750),
        )
        bare = make_job(
            clock,
            invocation=Invocation(target="conformance.bare:run"),
            retry=RetrySpec(kind=RetryKind.FIXED, max_attempts=2, base_delay=timedelta(1)),
        )
        awaiting = make_job(clock, state=JobState.AWAITING, parent_id=parent_id, priority=2**31 - 1)
        assert store.jobs.enqueue([full, bare, awaiting]) == [full.id, bare.id, awaiting.id]

        for expected in (full, bare, awaiting):
            _assert_same_job(stored_job(store, expected.id), expected)
        assert store.jobs.get_job(new_id(clock)) is None

    def test_claim_returns_the_hard_timeout_and_retry_filters(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """A claimed job carries its hard timeout and its retry policy's exception filters
        as enqueued (the worker decides from the claimed record alone)."""
        retry = RetrySpec(
            kind=RetryKind.FIXED,
            max_attempts=3,
            base_delay=timedelta(seconds=1),
            max_delay=timedelta(seconds=1),
            give_up_on=("builtins.ValueError", "shop.errors.Refused"),
        )
        enqueue(store, clock, retry=retry, hard_timeout=timedelta(seconds=12.5))
        claimed = claim_one(store)
        assert claimed.hard_timeout == timedelta(seconds=12.5)
        assert claimed.retry == retry
        enqueue(store, clock)
        plain = claim_one(store)
        assert plain.hard_timeout is None
        assert plain.retry == RetrySpec()

    def test_renew_excludes_jobs_reclaimed_by_another_worker(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Renewal omits (and leaves alone) jobs reclaimed by others, finished or unknown."""
        lost_id = enqueue(store, clock)
        kept_id = enqueue(store, clock)
        done_id = enqueue(store, clock)
        taken = claim(store, "w1", max_count=3)
        assert [job.id for job in taken] == [lost_id, kept_id, done_id]
        assert store.jobs.apply(succeed(taken[2], clock))
        clock.advance(LEASE)
        assert claim_one(store, "w2").id == lost_id
        stolen_until = clock.now() + LEASE
        clock.advance(timedelta(seconds=30))

        ids = [lost_id, kept_id, done_id, new_id(clock)]
        assert store.jobs.renew_leases("w1", ids, LEASE) == {kept_id}

        lost = stored_job(store, lost_id)
        assert lost.worker_id == "w2"
        assert lost.attempt == 2
        assert lost.lease_until == stolen_until
        kept = stored_job(store, kept_id)
        assert kept.worker_id == "w1"
        assert kept.lease_until == clock.now() + LEASE
        done = stored_job(store, done_id)
        assert done.state is JobState.SUCCEEDED
        assert done.lease_until is None
        assert done.worker_id is None


def _claimed(result: object) -> list[JobRecord]:
    assert isinstance(result, list)
    return [job for job in result if isinstance(job, JobRecord)]
