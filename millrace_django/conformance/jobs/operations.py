"""Operator additions: paused queues, the worker registry and deleting a finished job."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import ClassVar

import pytest

from millrace_django.clock import FakeClock
from millrace_django.conformance.harness import StoreUnderTest
from millrace_django.conformance.suite import FactGroup
from millrace_django.conformance.support import (
    claim,
    claim_one,
    enqueue,
    job_in_state,
    release,
    state_of,
    stored_job,
    succeed,
)
from millrace_django.contract import JobState, WorkerHeartbeat
from millrace_django.ids import new_id


class PausedQueueFacts(FactGroup):
    heading: ClassVar[str] = "Paused queues"

    def test_a_paused_queues_jobs_are_not_claimed_and_other_queues_are(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Claim skips every job of a paused queue, even asked for it alone, and still
        leases the jobs of the other requested queues."""
        held = enqueue(store, clock, queue="held", priority=10)
        free = enqueue(store, clock, queue="free")
        store.jobs.pause_queue("held")

        assert claim(store, queues=("held",), max_count=5) == []
        claimed = claim(store, queues=("held", "free"), max_count=5)

        assert [job.id for job in claimed] == [free]
        assert state_of(store, held) is JobState.ENQUEUED
        assert store.jobs.paused_queues() == {"held"}

    def test_resume_makes_a_paused_queues_jobs_claimable_again(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """After resume, the queue's jobs are claimed in the usual order."""
        first = enqueue(store, clock, queue="held")
        second = enqueue(store, clock, queue="held")
        store.jobs.pause_queue("held")
        assert claim(store, queues=("held",), max_count=5) == []

        store.jobs.resume_queue("held")

        assert store.jobs.paused_queues() == set()
        claimed = claim(store, queues=("held",), max_count=5)
        assert [job.id for job in claimed] == [first, second]

    def test_pause_and_resume_are_idempotent(self, store: StoreUnderTest, clock: FakeClock) -> None:
        """Pausing twice is one pause (one resume lifts it); resuming an unpaused queue
        is a no-op."""
        store.jobs.resume_queue("never-paused")
        store.jobs.pause_queue("held")
        store.jobs.pause_queue("held")
        store.jobs.pause_queue("other")
        assert store.jobs.paused_queues() == {"held", "other"}

        store.jobs.resume_queue("held")

        assert store.jobs.paused_queues() == {"other"}
        job_id = enqueue(store, clock, queue="held")
        assert claim_one(store, queues=("held",)).id == job_id

    def test_pausing_does_not_touch_processing_jobs(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """A job already processing keeps its lease, renews and completes under a pause."""
        job_id = enqueue(store, clock, queue="held")
        job = claim_one(store, queues=("held",))
        store.jobs.pause_queue("held")

        assert stored_job(store, job_id).state is JobState.PROCESSING
        assert store.jobs.renew_leases("w1", [job_id], timedelta(minutes=5)) == {job_id}
        assert store.jobs.apply(succeed(job, clock))
        assert state_of(store, job_id) is JobState.SUCCEEDED

    def test_an_expired_lease_in_a_paused_queue_is_not_reclaimed(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Claim leaves an expired lease of a paused queue alone until resume."""
        job_id = enqueue(store, clock, queue="held")
        claim_one(store, queues=("held",), lease=timedelta(seconds=10))
        store.jobs.pause_queue("held")
        clock.advance(timedelta(minutes=1))

        assert claim(store, "w2", queues=("held",)) == []
        store.jobs.resume_queue("held")
        reclaimed = claim_one(store, "w2", queues=("held",))
        assert (reclaimed.id, reclaimed.attempt) == (job_id, 2)

    def test_jobs_enqueued_or_released_into_a_paused_queue_wait_for_resume(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Enqueueing into a paused queue works; the jobs (and released ones) wait."""
        store.jobs.pause_queue("held")
        job_id = enqueue(store, clock, queue="held")
        assert state_of(store, job_id) is JobState.ENQUEUED
        assert claim(store, queues=("held",)) == []
        store.jobs.resume_queue("held")
        taken = claim_one(store, queues=("held",))
        store.jobs.pause_queue("held")
        assert store.jobs.apply(release(taken))
        assert claim(store, queues=("held",)) == []


def _heartbeat(worker_id: str, seen_at: datetime, **fields: object) -> WorkerHeartbeat:
    values: dict[str, object] = {
        "worker_id": worker_id,
        "hostname": "host-1",
        "pid": 4242,
        "queues": frozenset({"default", "emails"}),
        "concurrency": 8,
        "in_flight": 3,
        "started_at": datetime(2026, 1, 1, 12, 0, tzinfo=UTC),
        "seen_at": seen_at,
    }
    values.update(fields)
    return WorkerHeartbeat(**values)  # type: ignore[arg-type]


class WorkerRegistryFacts(FactGroup):
    heading: ClassVar[str] = "Worker registry"

    def test_a_heartbeat_is_listed_with_every_field(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """record_worker_heartbeat stores a row list_workers returns field for field."""
        beat = _heartbeat("w1", clock.now())
        store.jobs.record_worker_heartbeat(beat)

        assert store.jobs.list_workers() == [beat]

    def test_a_heartbeat_replaces_the_workers_row(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """A later heartbeat of the same worker is an upsert: one row, the newest values."""
        store.jobs.record_worker_heartbeat(_heartbeat("w1", clock.now()))
        clock.advance(timedelta(seconds=5))
        newer = _heartbeat(
            "w1", clock.now(), in_flight=0, queues=frozenset({"default"}), hostname="host-2"
        )
        store.jobs.record_worker_heartbeat(newer)

        assert store.jobs.list_workers() == [newer]

    def test_workers_are_listed_most_recently_seen_first(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """list_workers orders by seen_at descending, then worker id."""
        start = clock.now()
        store.jobs.record_worker_heartbeat(_heartbeat("old", start))
        store.jobs.record_worker_heartbeat(_heartbeat("b", start + timedelta(seconds=9)))
        store.jobs.record_worker_heartbeat(_heartbeat("a", start + timedelta(seconds=9)))

        assert [w.worker_id for w in store.jobs.list_workers()] == ["a", "b", "old"]

    def test_forget_workers_deletes_rows_seen_before_the_cutoff_only(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """forget_workers deletes seen_at < cutoff (not at it) and returns the count."""
        start = clock.now()
        cutoff = start + timedelta(minutes=1)
        store.jobs.record_worker_heartbeat(_heartbeat("gone-1", start))
        store.jobs.record_worker_heartbeat(_heartbeat("gone-2", start + timedelta(seconds=59)))
        store.jobs.record_worker_heartbeat(_heartbeat("at-cutoff", cutoff))

        assert store.jobs.forget_workers(cutoff) == 2
        assert [w.worker_id for w in store.jobs.list_workers()] == ["at-cutoff"]
        assert store.jobs.forget_workers(cutoff) == 0

    def test_forget_workers_never_forgets_a_live_worker_and_a_forgotten_one_returns(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Rows seen after the cutoff stay; a forgotten worker's next heartbeat re-registers it."""
        silent = _heartbeat("silent", clock.now())
        store.jobs.record_worker_heartbeat(silent)
        clock.advance(timedelta(days=1))
        live = _heartbeat("live", clock.now(), in_flight=5)
        store.jobs.record_worker_heartbeat(live)

        assert store.jobs.forget_workers(clock.now() - timedelta(hours=1)) == 1
        assert store.jobs.list_workers() == [live]
        clock.advance(timedelta(seconds=5))
        back = _heartbeat("silent", clock.now())
        store.jobs.record_worker_heartbeat(back)
        assert store.jobs.list_workers() == [back, live]

    def test_a_registry_row_never_affects_a_workers_jobs(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Forgetting a worker leaves its job processing; the job returns by its lease."""
        job_id = enqueue(store, clock)
        claim_one(store, "w1", lease=timedelta(seconds=30))
        store.jobs.record_worker_heartbeat(_heartbeat("w1", clock.now()))
        clock.advance(timedelta(minutes=5))
        assert store.jobs.forget_workers(clock.now()) == 1
        assert stored_job(store, job_id).worker_id == "w1"

        reclaimed = claim_one(store, "w2")
        assert (reclaimed.id, reclaimed.attempt) == (job_id, 2)


class DeleteJobFacts(FactGroup):
    heading: ClassVar[str] = "Deleting a job"

    @pytest.mark.parametrize("state", [JobState.SUCCEEDED, JobState.DEAD, JobState.CANCELLED])
    def test_a_terminal_job_is_deleted(
        self, store: StoreUnderTest, clock: FakeClock, state: JobState
    ) -> None:
        """delete_job removes a terminal job with its history; a second delete is False."""
        job_id = job_in_state(store, clock, state)

        assert store.jobs.delete_job(job_id)
        assert store.jobs.get_job(job_id) is None
        assert store.monitoring.get_job_details(job_id) is None
        assert not store.jobs.delete_job(job_id)

    @pytest.mark.parametrize(
        "state",
        [
            JobState.SCHEDULED,
            JobState.ENQUEUED,
            JobState.PROCESSING,
            JobState.FAILED,
            JobState.AWAITING,
        ],
    )
    def test_an_active_job_is_never_deleted(
        self, store: StoreUnderTest, clock: FakeClock, state: JobState
    ) -> None:
        """delete_job refuses every active job: False, the job unchanged."""
        job_id = job_in_state(store, clock, state)
        before = stored_job(store, job_id)

        assert not store.jobs.delete_job(job_id)
        assert stored_job(store, job_id) == before

    def test_an_unknown_job_is_not_deleted(self, store: StoreUnderTest, clock: FakeClock) -> None:
        """delete_job of an id never stored: False."""
        assert not store.jobs.delete_job(new_id(clock))
