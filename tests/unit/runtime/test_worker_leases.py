"""Leases, heartbeats and cancellation: a running job stops when it must, in fake time."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta

from millrace_django.clock import FakeClock
from millrace_django.contract import ClaimRequest, JobState
from millrace_django.engine import CancelReason, JobClient, Retry
from millrace_django.runtime import Hooks, RuntimeSettings
from millrace_django.storage.memory import MemoryStorage
from tests.unit.runtime import jobs
from tests.unit.runtime.conftest import StartWorker
from tests.unit.runtime.helpers import (
    TIMEOUT,
    started,
    steal,
    stored,
    wait_for_state,
    wait_until,
)
from tests.unit.runtime.jobs import board


def test_the_heartbeat_keeps_a_job_alive_past_several_lease_lengths(
    client: JobClient,
    storage: MemoryStorage,
    clock: FakeClock,
    settings: RuntimeSettings,
    start_worker: StartWorker,
) -> None:
    job_id = jobs.hold.enqueue("long")
    start_worker()
    started("long")
    for _ in range(10):  # 100 s of fake time, over three lease lengths
        clock.advance(settings.heartbeat)
        wait_until(
            lambda: stored(storage, job_id).lease_until == clock.now() + settings.lease,
            "the heartbeat to renew the lease",
        )
    assert steal(storage, clock, settings.heartbeat) == []  # nobody else may claim it
    board.event("long").set()
    job = wait_for_state(storage, job_id, JobState.SUCCEEDED)
    assert (job.attempt, job.result) == (1, "long")


def test_a_completion_written_later_than_its_lease_had_left_keeps_its_job(
    client: JobClient,
    storage: MemoryStorage,
    clock: FakeClock,
    settings: RuntimeSettings,
    start_worker: StartWorker,
) -> None:
    # The acknowledgement waits (as a write does for SQLite's writer lock, or behind a
    # slow batch) while the clock passes the end of the lease the job had when it ended.
    written = threading.Event()

    @contextmanager
    def turn() -> Iterator[None]:
        if threading.current_thread().name == "millrace-acks":
            written.wait(TIMEOUT)
        yield

    job_id = jobs.record.enqueue("once")
    worker = start_worker(hooks=Hooks(around_turn=turn)).worker
    wait_until(lambda: ("record", "once") in board.calls, "the job to run")
    ended_with = stored(storage, job_id).lease_until
    assert ended_with is not None
    while clock.now() <= ended_with:
        beats = worker.stats.heartbeats
        clock.advance(settings.heartbeat)
        wait_until(lambda beats=beats: worker.stats.heartbeats > beats, "a heartbeat")

    another = ClaimRequest(
        worker_id="another", queues=frozenset({"default"}), max_count=10, lease=settings.lease
    )
    assert storage.claim(another) == []  # the claim was renewed: nobody may run it again
    written.set()
    job = wait_for_state(storage, job_id, JobState.SUCCEEDED)
    assert (job.attempt, board.calls.count(("record", "once"))) == (1, 1)


def test_a_lost_lease_stops_the_local_run_without_writing_a_transition(
    client: JobClient,
    storage: MemoryStorage,
    clock: FakeClock,
    settings: RuntimeSettings,
    start_worker: StartWorker,
) -> None:
    job_id = jobs.cooperate.enqueue("lost")
    worker = start_worker(tick=timedelta(minutes=1)).worker  # heartbeats only when asked
    started("lost")
    assert len(steal(storage, clock, settings.lease)) == 1
    worker.heartbeat()
    wait_until(lambda: worker.stats.in_flight == 0, "the local run to stop")
    job = stored(storage, job_id)
    assert (job.state, job.worker_id, job.attempt) == (JobState.PROCESSING, "thief", 2)
    assert (worker.stats.acknowledged, worker.stats.fence_lost) == ({}, 0)


def test_a_cancel_request_interrupts_a_running_job(
    client: JobClient,
    storage: MemoryStorage,
    clock: FakeClock,
    settings: RuntimeSettings,
    start_worker: StartWorker,
) -> None:
    job_id = jobs.cooperate.enqueue("unwanted")
    start_worker()
    started("unwanted")
    assert client.cancel(job_id)
    clock.advance(settings.heartbeat)
    job = wait_for_state(storage, job_id, JobState.CANCELLED)
    assert (job.last_error, job.failures) == ("Cancelled by request.", 0)


def test_a_job_past_its_timeout_is_cancelled_and_fails_as_timed_out(
    client: JobClient, storage: MemoryStorage, clock: FakeClock, start_worker: StartWorker
) -> None:
    job_id = client.enqueue(
        jobs.cooperate.using(timeout=timedelta(seconds=5), retry=Retry.none()), "slow"
    )
    start_worker()
    started("slow")
    clock.advance(timedelta(seconds=5))
    job = wait_for_state(storage, job_id, JobState.DEAD)
    assert (job.last_error, job.failures) == ("Timed out after 5 seconds.", 1)


def test_a_job_ignoring_its_timeout_is_abandoned_after_the_grace_and_frees_its_slot(
    client: JobClient,
    storage: MemoryStorage,
    clock: FakeClock,
    settings: RuntimeSettings,
    start_worker: StartWorker,
) -> None:
    stuck = client.enqueue(
        jobs.stubborn.using(timeout=timedelta(seconds=5), retry=Retry.none()), "stuck"
    )
    worker = start_worker(concurrency=1).worker
    started("stuck")
    clock.advance(timedelta(seconds=5))
    wait_until(
        lambda: ("stubborn", "stuck", CancelReason.TIMEOUT) in board.calls,
        "the timeout to fire",
    )
    clock.advance(settings.shutdown_grace)
    job = wait_for_state(storage, stuck, JobState.DEAD)
    assert job.last_error == "Timed out after 5 seconds."
    assert worker.stats.abandoned == 1
    after = jobs.record.enqueue("after")  # the only slot is free again
    wait_for_state(storage, after, JobState.SUCCEEDED)
    board.event("stuck").set()
    wait_until(lambda: ("stubborn", "stuck", "returned") in board.calls, "the stuck job to end")
    assert stored(storage, stuck).state is JobState.DEAD  # its late result is discarded
    assert worker.stats.acknowledged == {JobState.DEAD: 1, JobState.SUCCEEDED: 1}


def test_reclaiming_a_job_it_still_runs_supersedes_the_older_attempt(
    client: JobClient,
    storage: MemoryStorage,
    clock: FakeClock,
    settings: RuntimeSettings,
    start_worker: StartWorker,
) -> None:
    job_id = jobs.hold.enqueue("twice")
    worker = start_worker(tick=timedelta(minutes=1)).worker  # no heartbeat: the lease lapses
    started("twice")
    clock.advance(settings.lease + timedelta(seconds=1))
    jobs.record.enqueue("nudge")  # the wake-up makes the worker claim again at once
    wait_until(lambda: worker.stats.abandoned == 1, "the older attempt to be superseded")
    assert stored(storage, job_id).attempt == 2
    board.event("twice").set()
    job = wait_for_state(storage, job_id, JobState.SUCCEEDED)
    assert job.attempt == 2
    wait_until(lambda: worker.stats.in_flight == 0, "both attempts to end")
    assert worker.stats.acknowledged == {JobState.SUCCEEDED: 2}  # the nudge and attempt 2
