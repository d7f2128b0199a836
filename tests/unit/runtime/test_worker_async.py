"""Async jobs run as coroutines on the worker's event loop, bounded by their own limit."""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import timedelta

import pytest

from millrace_django.clock import FakeClock
from millrace_django.contract import JobState
from millrace_django.engine import CancelReason, JobClient, Retry
from millrace_django.runtime import RuntimeSettings, acks
from millrace_django.storage.memory import MemoryStorage
from tests.unit.runtime import jobs
from tests.unit.runtime.conftest import StartWorker
from tests.unit.runtime.helpers import TIMEOUT, started, stored, wait_for_state, wait_until
from tests.unit.runtime.jobs import board


def async_started() -> list[str]:
    return [call[1] for call in board.calls if call[0] == "async_started"]


def test_async_jobs_run_at_once_beyond_the_thread_count_and_hold_no_thread(
    client: JobClient,
    storage: MemoryStorage,
    settings: RuntimeSettings,
    start_worker: StartWorker,
) -> None:
    names = [f"gate-{n}" for n in range(6)]
    waiting = [jobs.async_gate.enqueue(name) for name in names]
    start_worker(config=replace(settings, concurrency=1, async_concurrency=6))
    # None can finish before its gate opens: all six run at once, on one thread.
    wait_until(lambda: sorted(async_started()) == names, "every async job to start")
    assert {call[2] for call in board.calls if call[0] == "async_started"} == {"millrace-asyncio"}
    plain = jobs.record.enqueue("plain")  # the only job thread is still free
    wait_for_state(storage, plain, JobState.SUCCEEDED)
    for name in names:
        board.event(name).set()
    for job_id in waiting:
        assert wait_for_state(storage, job_id, JobState.SUCCEEDED).attempt == 1


def test_async_concurrency_bounds_the_coroutines_and_the_rest_start_in_turn(
    client: JobClient,
    storage: MemoryStorage,
    settings: RuntimeSettings,
    start_worker: StartWorker,
) -> None:
    names = [f"turn-{n}" for n in range(5)]
    waiting = [jobs.async_gate.enqueue(name) for name in names]
    start_worker(config=replace(settings, concurrency=4, async_concurrency=2))
    wait_until(lambda: len(async_started()) == 2, "two async jobs to start")
    time.sleep(0.1)  # time enough for a third to start, were it allowed
    first = async_started()
    assert len(first) == 2
    for name in first:
        board.event(name).set()
    wait_until(lambda: len(async_started()) == 4, "the next two to take the slots")
    for name in names:
        board.event(name).set()
    for job_id in waiting:
        wait_for_state(storage, job_id, JobState.SUCCEEDED)


def test_an_async_job_ignoring_its_cancellation_is_abandoned_its_task_cancelled(
    client: JobClient,
    storage: MemoryStorage,
    clock: FakeClock,
    settings: RuntimeSettings,
    start_worker: StartWorker,
) -> None:
    stuck = client.enqueue(
        jobs.async_stubborn.using(timeout=timedelta(seconds=5), retry=Retry.none()), "stuck"
    )
    worker = start_worker(config=replace(settings, async_concurrency=1)).worker
    started("stuck")
    behind = jobs.async_gate.enqueue("behind")  # waits for the only async slot
    time.sleep(0.05)
    assert async_started() == []
    clock.advance(timedelta(seconds=5))
    wait_until(
        lambda: ("async_stubborn", "stuck", CancelReason.TIMEOUT) in board.calls,
        "the timeout to fire",
    )
    clock.advance(settings.shutdown_grace)
    job = wait_for_state(storage, stuck, JobState.DEAD)
    assert job.last_error == "Timed out after 5 seconds."
    assert worker.stats.abandoned == 1
    wait_until(
        lambda: ("async_stubborn", "stuck", "task cancelled", CancelReason.TIMEOUT) in board.calls,
        "the abandoned job's task to be cancelled",
    )
    board.event("behind").set()
    wait_for_state(storage, behind, JobState.SUCCEEDED)  # the slot was freed
    assert stored(storage, stuck).state is JobState.DEAD


def test_a_run_of_async_jobs_is_claimed_for_the_coroutine_slots_not_for_idle_threads(
    client: JobClient,
    storage: MemoryStorage,
    settings: RuntimeSettings,
    start_worker: StartWorker,
) -> None:
    # Leased jobs beyond what the worker can start soon are jobs another worker could run.
    names = [f"run-{n}" for n in range(40)]
    waiting = [jobs.async_gate.enqueue(name) for name in names]
    config = replace(settings, concurrency=8, async_concurrency=4, claim_batch=4)
    start_worker(config=config)
    wait_until(lambda: len(async_started()) == 4, "the four async slots to fill")
    time.sleep(0.1)  # time enough for the claim loop to claim more, were it allowed
    leased = [job_id for job_id in waiting if stored(storage, job_id).state is JobState.PROCESSING]
    # The slots, one batch waiting for them, and what the first claim (before any job was
    # known to be async) fetched for the threads: not the backlog.
    assert len(leased) <= config.async_concurrency + 2 * config.claim_batch, len(leased)
    for name in names:
        board.event(name).set()
    for job_id in waiting:
        wait_for_state(storage, job_id, JobState.SUCCEEDED)


def test_the_last_async_job_to_finish_is_written_without_lingering(
    client: JobClient,
    storage: MemoryStorage,
    settings: RuntimeSettings,
    start_worker: StartWorker,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # An acknowledgement may linger while other jobs are about to finish; the last
    # one's must not, even while the others' tasks are still ending on the loop.
    monkeypatch.setattr(acks, "LINGER", 10 * TIMEOUT)  # a linger would outlast the wait
    names = [f"together-{n}" for n in range(3)]
    waiting = [jobs.async_gate.enqueue(name) for name in names]
    start_worker(config=replace(settings, concurrency=1, async_concurrency=3))
    wait_until(lambda: sorted(async_started()) == names, "every async job to start")
    for name in names:
        board.event(name).set()
    for job_id in waiting:
        wait_for_state(storage, job_id, JobState.SUCCEEDED)
