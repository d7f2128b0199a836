"""The kit has teeth: deliberately broken providers fail the facts that guard them.

Each broken provider is the in-memory provider with one guarantee taken away. The same
fact passes against the intact provider, so the failure is the breakage, not the fact;
and it fails at every contention the kit offers, so a binding that scales its races down
keeps the teeth.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime
from uuid import UUID

import pytest

from millrace_django.clock import Clock, FakeClock, SystemClock
from millrace_django.conformance.contention import (
    FULL_CONTENTION,
    SINGLE_WRITER_CONTENTION,
    Contention,
)
from millrace_django.conformance.jobs.claims import ClaimFacts
from millrace_django.conformance.jobs.expiry import ExpiryFacts
from millrace_django.conformance.jobs.fence import FenceFacts
from millrace_django.conformance.jobs.giving_back import GivingBackFacts
from millrace_django.conformance.jobs.idempotency import IdempotencyFacts
from millrace_django.conformance.jobs.overlap import OverlapFacts
from millrace_django.conformance.suite import FactGroup
from millrace_django.conformance.workflows import WorkflowStorageFacts
from millrace_django.contract import (
    BookmarkRecord,
    ClaimRequest,
    FireOutcome,
    JobRecord,
    JobState,
    JobTransition,
    OverlapPolicy,
    RecurringRecord,
)
from millrace_django.storage.memory import MemoryStorage, MemoryStoreUnderTest

STALE_READ_PAUSE = 0.005  # long enough for the other racers to read the same rows


class ReadThenWriteClaim(MemoryStorage):
    """Picks its jobs under the lock, then leases them after letting go of it."""

    def claim(self, request: ClaimRequest) -> list[JobRecord]:
        with self._reading() as tables:
            picked = [
                job
                for job in tables.jobs.values()
                if job.state is JobState.ENQUEUED and job.queue in request.queues
            ][: request.max_count]
        time.sleep(STALE_READ_PAUSE)
        with self._atomic() as log:
            leased = []
            for job in picked:
                current = log.tables.jobs[job.id]
                claimed = replace(
                    current,
                    state=JobState.PROCESSING,
                    worker_id=request.worker_id,
                    lease_until=self.clock.now() + request.lease,
                    attempt=current.attempt + 1,
                )
                log.put_job(current, claimed)
                leased.append(claimed)
            return leased


class UnfencedApply(MemoryStorage):
    """Applies a transition to whoever holds the job, ignoring worker and attempt."""

    def apply(self, transition: JobTransition) -> bool:
        job = self.get_job(transition.job_id)
        if job is None or job.worker_id is None:
            return False
        fenced = replace(transition, expected_worker_id=job.worker_id, expected_attempt=job.attempt)
        return super().apply(fenced)


class ChargedGiveBack(MemoryStorage):
    """Applies a give-back as an ordinary release: the attempt kept and recorded."""

    def apply(self, transition: JobTransition) -> bool:
        return super().apply(replace(transition, unstarted=False))


class ReadThenWriteKeys(MemoryStorage):
    """Checks the idempotency scope, then inserts after letting go of the lock."""

    def enqueue(self, jobs: Sequence[JobRecord]) -> list[UUID]:
        with self._reading() as tables:
            held = [
                tables.active_keys.get((job.tenant_id, job.idempotency_key or "")) for job in jobs
            ]
        time.sleep(STALE_READ_PAUSE)
        with self._atomic() as log:
            ids: list[UUID] = []
            for job, holder in zip(jobs, held, strict=True):
                if holder is not None:
                    ids.append(holder)
                else:
                    log.insert_job(job)
                    ids.append(job.id)
            return ids


class ReadThenDeleteBookmark(MemoryStorage):
    """Finds the oldest bookmark, then deletes it after letting go of the lock."""

    def consume_bookmark(  # type: ignore[override]
        self, signal_name: str, correlation_id: str, enqueue: object = None
    ) -> BookmarkRecord | None:
        with self._reading() as tables:
            matches = [
                b
                for b in tables.bookmarks.values()
                if (b.signal_name, b.correlation_id) == (signal_name, correlation_id)
            ]
        if not matches:
            return None
        time.sleep(STALE_READ_PAUSE)
        oldest = min(matches, key=lambda b: (b.created_at, b.id.bytes))
        with self._atomic() as log:
            log.set(log.tables.bookmarks, oldest.id, None)
        return oldest


class DeadlineBlindClaim(MemoryStorage):
    """Claims enqueued jobs whatever their deadline."""

    def claim(self, request: ClaimRequest) -> list[JobRecord]:
        with self._atomic() as log:
            for job in list(log.tables.jobs.values()):
                if job.state is JobState.ENQUEUED and job.expires_at is not None:
                    log.put_job(job, replace(job, expires_at=None))
        return super().claim(request)


class PolicyBlindFire(MemoryStorage):
    """Fires every occurrence as ``allow`` would, whatever the definition's policy."""

    def try_fire_recurring(
        self, recurring_id: str, expected: datetime, next_fire_time: datetime, job: JobRecord
    ) -> FireOutcome:
        with self._atomic() as log:
            stored = log.tables.recurring.get(recurring_id)
            if stored is not None:
                allowed = replace(stored, overlap=OverlapPolicy.ALLOW)
                log.set(log.tables.recurring, recurring_id, allowed)
        return super().try_fire_recurring(recurring_id, expected, next_fire_time, job)


class HeldInTheDueRead(MemoryStorage):
    """Reads held definitions as due, so they crowd out the others."""

    def get_due_recurring(self, now: datetime, limit: int) -> list[RecurringRecord]:
        with self._reading() as tables:
            due = sorted(
                (r for r in tables.recurring.values() if r.next_fire_time <= now),
                key=lambda r: (r.next_fire_time, r.id),
            )
        return due[:limit]


class WallClock(MemoryStorage):
    """Ignores the clock it was handed and reads the wall clock instead."""

    def __init__(self, clock: Clock) -> None:
        super().__init__(SystemClock())


Fact = Callable[[MemoryStoreUnderTest, FakeClock], None]
Provider = Callable[[Clock], MemoryStorage]

CONTENTIONS = {"full": FULL_CONTENTION, "single writer": SINGLE_WRITER_CONTENTION}
"""Every contention the kit offers: its race facts keep their teeth at each."""


def _at[G: FactGroup](group: type[G], contention: Contention) -> G:
    facts = group()
    facts.contention = contention
    return facts


def _cases(contention: Contention) -> list[tuple[str, Provider, Fact]]:
    claims = _at(ClaimFacts, contention)
    fence = _at(FenceFacts, contention)
    giving_back = _at(GivingBackFacts, contention)
    overlap = _at(OverlapFacts, contention)
    return [
        (
            "a claim that is not exclusive",
            ReadThenWriteClaim,
            claims.test_claim_is_exclusive_under_contention,
        ),
        (
            "an apply without the fence (wrong worker)",
            UnfencedApply,
            fence.test_apply_with_wrong_worker_is_rejected_without_changes,
        ),
        (
            "an apply without the fence (zombie worker)",
            UnfencedApply,
            fence.test_apply_zombie_versus_new_owner_exactly_one_wins,
        ),
        (
            "a give-back without the fence",
            UnfencedApply,
            giving_back.test_giving_back_is_fenced_like_any_transition,
        ),
        (
            "a give-back charged like a release (attempt kept)",
            ChargedGiveBack,
            giving_back.test_giving_back_enqueues_the_job_again_and_the_next_claim_reuses_its_attempt,
        ),
        (
            "a give-back charged like a release (history written)",
            ChargedGiveBack,
            giving_back.test_a_given_back_attempt_leaves_no_history_and_its_number_records_its_own_end,
        ),
        (
            "an idempotency check that reads then writes",
            ReadThenWriteKeys,
            _at(
                IdempotencyFacts, contention
            ).test_concurrent_same_key_enqueues_yield_exactly_one_job,
        ),
        (
            "a bookmark consumed by read then delete",
            ReadThenDeleteBookmark,
            _at(WorkflowStorageFacts, contention).test_consume_is_at_most_once_under_contention,
        ),
        (
            "a claim blind to deadlines",
            DeadlineBlindClaim,
            _at(
                ExpiryFacts, contention
            ).test_a_claim_never_starts_an_enqueued_job_at_or_after_its_deadline,
        ),
        (
            "a fire blind to the overlap policy",
            PolicyBlindFire,
            overlap.test_skip_drops_the_occurrence_while_the_previous_job_is_active_and_records_it,
        ),
        (
            "a due read that returns held definitions",
            HeldInTheDueRead,
            overlap.test_queue_holds_the_occurrence_until_the_previous_job_ends,
        ),
        (
            "a provider that reads the wall clock",
            WallClock,
            claims.test_claim_sets_processing_worker_lease_and_increments_attempt,
        ),
        (
            "a provider that reads the wall clock (lease expiry)",
            WallClock,
            claims.test_expired_lease_is_reclaimable_and_increments_attempt,
        ),
    ]


CASES = [
    pytest.param(breakage, provider, fact, id=f"{breakage}, {level} contention")
    for level, contention in CONTENTIONS.items()
    for breakage, provider, fact in _cases(contention)
]


def _run(provider: Provider, fact: Fact) -> None:
    clock = FakeClock()
    fact(MemoryStoreUnderTest(provider(clock)), clock)


@pytest.mark.parametrize(("breakage", "provider", "fact"), CASES)
def test_the_kit_fails_a_provider_with(breakage: str, provider: Provider, fact: Fact) -> None:
    with pytest.raises(AssertionError):
        _run(provider, fact)


@pytest.mark.parametrize(("breakage", "provider", "fact"), CASES)
def test_the_same_fact_passes_the_intact_provider(
    breakage: str, provider: Provider, fact: Fact
) -> None:
    _run(MemoryStorage, fact)
