"""Job checkpoints: a running job's own JSON value, fenced, for its next attempt."""

from __future__ import annotations

from datetime import timedelta
from typing import ClassVar
from uuid import UUID

from millrace_django.clock import FakeClock
from millrace_django.conformance.harness import StoreUnderTest
from millrace_django.conformance.suite import FactGroup
from millrace_django.conformance.support import (
    LEASE,
    claim_one,
    enqueue,
    fail,
    job_details,
    stored_job,
    succeed,
)
from millrace_django.contract import JSON, CheckpointReport, JobRecord


def _save(store: StoreUnderTest, job: JobRecord, data: JSON, **fence: object) -> bool:
    """Save ``data`` as ``job``'s checkpoint under the fence of the claim that gave ``job``
    (or the one given)."""
    values: dict[str, object] = {"worker_id": job.worker_id, "attempt": job.attempt}
    values.update(fence)
    report = CheckpointReport(job_id=job.id, data=data, **values)  # type: ignore[arg-type]
    return store.jobs.save_checkpoint(report)


class JobCheckpointFacts(FactGroup):
    heading: ClassVar[str] = "Job checkpoints"

    def test_a_saved_checkpoint_is_read_by_the_next_claim_after_a_failure(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """The retry's claim returns the checkpoint the failed attempt saved last."""
        job_id = enqueue(store, clock)
        first = claim_one(store)
        assert first.checkpoint is None
        assert _save(store, first, {"done": 10}) is True
        assert _save(store, first, {"done": 20, "cursor": "ü"}) is True
        assert stored_job(store, job_id).checkpoint == {"done": 20, "cursor": "ü"}
        assert store.jobs.apply(fail(first, clock, retry_in=timedelta(seconds=5))) is True
        clock.advance(timedelta(seconds=5))
        assert store.jobs.activate_due(clock.now(), 10) == 1

        second = claim_one(store, "w2")
        assert (second.id, second.attempt) == (job_id, 2)
        assert second.checkpoint == {"done": 20, "cursor": "ü"}
        assert job_details(store, job_id).checkpoint == {"done": 20, "cursor": "ü"}

    def test_a_checkpoint_survives_a_crash_and_stays_after_success(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """A reclaim after a crash reads the checkpoint; success keeps it; a purge removes it.

        Kept after success as history for the dashboard."""
        enqueue(store, clock)
        crashed = claim_one(store)
        assert _save(store, crashed, [1, 2, 3]) is True
        clock.advance(LEASE + timedelta(seconds=1))

        reclaimed = claim_one(store, "w2")
        assert reclaimed.checkpoint == [1, 2, 3]
        assert _save(store, reclaimed, 7) is True
        assert store.jobs.apply(succeed(reclaimed, clock)) is True
        assert stored_job(store, reclaimed.id).checkpoint == 7
        assert job_details(store, reclaimed.id).checkpoint == 7
        clock.advance(timedelta(days=1))
        assert store.jobs.purge_finished(clock.now(), 10) == 1
        assert store.jobs.get_job(reclaimed.id) is None

    def test_a_worker_fenced_off_cannot_overwrite_the_newer_owners_checkpoint(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """A save by a worker fenced off is refused (False); the new owner's checkpoint stays.

        So is a save for a wrong attempt or worker, a job no longer running or an
        unknown job."""
        job_id = enqueue(store, clock)
        old = claim_one(store, "w1")
        assert _save(store, old, "old owner") is True
        clock.advance(LEASE + timedelta(seconds=1))
        new = claim_one(store, "w2")
        assert _save(store, new, "new owner") is True

        assert _save(store, old, "zombie") is False
        assert _save(store, new, "wrong attempt", attempt=new.attempt + 1) is False
        assert _save(store, new, "wrong worker", worker_id="w1") is False
        assert stored_job(store, job_id).checkpoint == "new owner"
        assert store.jobs.apply(succeed(new, clock)) is True
        assert _save(store, new, "after the end") is False
        assert stored_job(store, job_id).checkpoint == "new owner"
        unknown = CheckpointReport(job_id=UUID(int=7), worker_id="w2", attempt=1, data=1)
        assert store.jobs.save_checkpoint(unknown) is False

    def test_saving_none_clears_the_checkpoint(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """``None`` is a checkpoint like any JSON value: the next attempt starts afresh."""
        enqueue(store, clock)
        job = claim_one(store)
        assert _save(store, job, {"page": 3}) is True
        assert _save(store, job, None) is True
        assert stored_job(store, job.id).checkpoint is None
