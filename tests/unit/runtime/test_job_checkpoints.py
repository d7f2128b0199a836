"""Job checkpoints end to end: a job saves where it got to, its next attempt resumes."""

from __future__ import annotations

from datetime import timedelta

from millrace_django.clock import FakeClock
from millrace_django.contract import JobState
from millrace_django.engine import JobClient, Retry
from millrace_django.runtime import RuntimeSettings, Scheduler
from millrace_django.storage.memory import MemoryStorage
from millrace_django.testing import JobRunner
from tests.unit.runtime import child_jobs, jobs
from tests.unit.runtime.conftest import StartWorker
from tests.unit.runtime.helpers import stored, wait_for_state, wait_until
from tests.unit.runtime.jobs import board

CHILD_WAIT = 30.0
"""Bound on waits that include starting a child interpreter (slow on a loaded machine)."""


def test_the_retry_resumes_from_the_checkpoint_the_failed_attempt_saved(
    runner: JobRunner,
) -> None:
    job_id = jobs.resumable.enqueue(10, 6)
    runner.run_until_idle()
    failed = runner.assert_state(job_id, JobState.FAILED)
    assert failed.checkpoint == 6
    runner.advance(timedelta(seconds=10))
    runner.run_until_idle()
    done = runner.assert_succeeded(job_id)
    assert done.result == 6
    assert done.checkpoint == 10  # kept after success, for the dashboard
    status = runner.client.get(job_id)
    assert status is not None and status.checkpoint == 10
    assert board.calls == [("resumable", 1, 0), ("resumable", 2, 6)]


def test_a_worker_saves_checkpoints_at_once_and_its_retry_resumes(
    client: JobClient,
    storage: MemoryStorage,
    clock: FakeClock,
    settings: RuntimeSettings,
    start_worker: StartWorker,
) -> None:
    job_id = jobs.resumable.enqueue(5, 3)
    start_worker()
    assert wait_for_state(storage, job_id, JobState.FAILED).checkpoint == 3
    clock.advance(timedelta(seconds=10))
    Scheduler(storage, clock, settings).run_once()
    assert wait_for_state(storage, job_id, JobState.SUCCEEDED).result == 3


def test_a_job_in_a_child_process_hands_its_checkpoint_to_the_worker(
    client: JobClient,
    storage: MemoryStorage,
    clock: FakeClock,
    settings: RuntimeSettings,
    start_worker: StartWorker,
) -> None:
    """With a hard timeout the job runs in a child; the worker saves its checkpoint
    under its own fence, and the retry's child reads it."""
    job_id = child_jobs.checkpoint_then_fail.using(
        hard_timeout=30, retry=Retry.fixed(timedelta(0), 2)
    ).enqueue()
    start_worker()
    scheduler = Scheduler(storage, clock, settings)

    def retried() -> bool:
        scheduler.run_once()  # (activates the retry once it failed)
        return stored(storage, job_id).state is JobState.SUCCEEDED

    wait_until(retried, "the retry", CHILD_WAIT)
    done = stored(storage, job_id)
    assert isinstance(done.result, dict) and done.result == done.checkpoint
    assert done.attempt == 2
