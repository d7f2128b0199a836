"""Hard timeouts: an attempt with ``hard_timeout`` runs in a child process the worker
kills at the limit; the worker's thread and the worker carry on."""

from __future__ import annotations

import math
import os
import time
from dataclasses import replace
from datetime import timedelta
from uuid import UUID

import pytest

from millrace_django.clock import FakeClock
from millrace_django.contract import ClaimRequest, JobState
from millrace_django.engine import JobClient, Retry
from millrace_django.runtime import RuntimeSettings, isolation
from millrace_django.storage.memory import MemoryStorage
from millrace_django.testing import JobRunner
from tests.unit.runtime import child_jobs, jobs
from tests.unit.runtime.conftest import StartWorker
from tests.unit.runtime.helpers import stored, wait_for_state, wait_until

CHILD_WAIT = 30.0
"""Bound on waits that include starting a child interpreter (slow on a loaded machine)."""


def finished(storage: MemoryStorage, job_id: UUID, state: JobState) -> None:
    wait_until(lambda: stored(storage, job_id).state is state, f"job {state}", CHILD_WAIT)


def test_a_hanging_job_is_killed_at_its_hard_timeout_and_the_thread_runs_the_next(
    client: JobClient,
    storage: MemoryStorage,
    settings: RuntimeSettings,
    start_worker: StartWorker,
) -> None:
    stuck = child_jobs.hang.using(hard_timeout=1).enqueue(600)
    following = jobs.record.enqueue("after")
    started = time.monotonic()
    start_worker(config=replace(settings, concurrency=1))

    finished(storage, stuck, JobState.DEAD)
    elapsed = time.monotonic() - started
    killed = stored(storage, stuck)
    assert killed.last_error == "Killed after its hard timeout of 1 second."
    assert killed.failures == 1
    assert 1 <= elapsed < CHILD_WAIT
    assert wait_for_state(storage, following, JobState.SUCCEEDED).result == "after"


def test_a_hard_timeout_shorter_than_the_childs_start_up_counts_only_the_run(
    client: JobClient, storage: MemoryStorage, start_worker: StartWorker
) -> None:
    # Starting the child interpreter takes about a second: a limit of a tenth of that
    # would kill every attempt before its function ran, were the start-up counted.
    job_id = child_jobs.report_and_return.using(hard_timeout=0.1).enqueue(2)
    start_worker()
    finished(storage, job_id, JobState.SUCCEEDED)


def test_a_killed_attempt_follows_the_retry_policy(
    client: JobClient, storage: MemoryStorage, clock: FakeClock, start_worker: StartWorker
) -> None:
    retried = child_jobs.hang.using(
        hard_timeout=timedelta(seconds=0.5), retry=Retry.fixed(timedelta(minutes=1), 2)
    ).enqueue(600)
    start_worker()
    finished(storage, retried, JobState.FAILED)
    waiting = stored(storage, retried)
    assert (waiting.failures, waiting.due_at) == (1, clock.now() + timedelta(minutes=1))
    assert waiting.last_error == "Killed after its hard timeout of 0.5 seconds."


def test_a_job_deaf_to_sigterm_is_killed_after_the_grace(
    client: JobClient,
    storage: MemoryStorage,
    start_worker: StartWorker,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(isolation, "KILL_GRACE", 0.5)
    deaf = child_jobs.hang_deaf_to_sigterm.using(hard_timeout=0.5).enqueue(600)
    start_worker()
    finished(storage, deaf, JobState.DEAD)
    assert stored(storage, deaf).last_error == "Killed after its hard timeout of 0.5 seconds."


def test_the_child_returns_its_result_and_relays_progress_and_logs(
    client: JobClient, storage: MemoryStorage, start_worker: StartWorker
) -> None:
    job_id = child_jobs.report_and_return.using(hard_timeout=30).enqueue(8)
    start_worker()
    finished(storage, job_id, JobState.SUCCEEDED)
    done = stored(storage, job_id)
    assert isinstance(done.result, dict) and done.result["n"] == 8
    assert done.result["pid"] != os.getpid()
    assert done.progress == 0.5
    details = storage.get_job_details(job_id)
    assert details is not None
    assert [line.message for line in details.logs] == ["half of 8"]


def test_an_async_job_with_a_hard_timeout_runs_in_a_child(
    client: JobClient, storage: MemoryStorage, start_worker: StartWorker
) -> None:
    job_id = child_jobs.async_pid.using(hard_timeout=30).enqueue()
    start_worker()
    finished(storage, job_id, JobState.SUCCEEDED)
    assert stored(storage, job_id).result not in (None, os.getpid())


def test_an_exception_in_the_child_is_the_failure_and_meets_the_retry_filters(
    client: JobClient, storage: MemoryStorage, start_worker: StartWorker
) -> None:
    job_id = child_jobs.refuse.using(
        hard_timeout=30, retry=Retry.fixed(timedelta(0), 5), give_up_on=ValueError
    ).enqueue(12)
    start_worker()
    finished(storage, job_id, JobState.DEAD)
    dead = stored(storage, job_id)
    assert dead.failures == 1  # final at once: give_up_on
    assert "ValueError: refused amount 12" in (dead.last_error or "")
    assert 'child_jobs.py", line' in (dead.last_error or "")  # the child's traceback


def test_a_result_that_cannot_be_stored_fails_as_in_process(
    client: JobClient, storage: MemoryStorage, start_worker: StartWorker
) -> None:
    job_id = child_jobs.unstorable.using(hard_timeout=30).enqueue()
    start_worker()
    finished(storage, job_id, JobState.DEAD)
    assert "cannot be stored as its result" in (stored(storage, job_id).last_error or "")


def test_the_cooperative_timeout_reaches_the_child_and_decides_the_outcome(
    client: JobClient, storage: MemoryStorage, clock: FakeClock, start_worker: StartWorker
) -> None:
    job_id = child_jobs.until_cancelled.using(
        timeout=timedelta(seconds=5), hard_timeout=60
    ).enqueue()
    start_worker()
    wait_until(lambda: stored(storage, job_id).state is JobState.PROCESSING, "the claim")
    time.sleep(1)  # (the timeout is watched in the worker, whatever the child is doing)
    clock.advance(timedelta(seconds=6))
    finished(storage, job_id, JobState.DEAD)
    assert stored(storage, job_id).last_error == "Timed out after 5 seconds."


@pytest.mark.parametrize(
    ("given", "stored_as"),
    [(2, timedelta(seconds=2)), (0.25, timedelta(milliseconds=250)), (timedelta(hours=1),) * 2],
)
def test_hard_timeout_takes_seconds_or_a_timedelta(
    client: JobClient, storage: MemoryStorage, given: object, stored_as: timedelta
) -> None:
    job_id = child_jobs.hang.using(hard_timeout=given).enqueue(1)  # type: ignore[arg-type]
    assert stored(storage, job_id).hard_timeout == stored_as


@pytest.mark.parametrize(
    "given", [0, -1, timedelta(0), math.inf, math.nan, True, "5", timedelta(seconds=-1)]
)
def test_hard_timeout_refuses_what_is_not_a_positive_duration(given: object) -> None:
    with pytest.raises(ValueError, match="hard_timeout must be a positive number of seconds"):
        child_jobs.hang.using(hard_timeout=given)  # type: ignore[arg-type]


def test_the_test_runner_runs_a_hard_timeout_job_in_the_tests_own_process(
    settings: RuntimeSettings,
) -> None:
    runner = JobRunner(config=settings)  # (the test's mocks and memory storage apply)
    with runner.installed():
        job_id = child_jobs.report_and_return.using(hard_timeout=30).enqueue(3)
        assert runner.run_until_idle() == 1
        assert runner.assert_succeeded(job_id).result == {"pid": os.getpid(), "n": 3}


def test_recurring_jobs_take_the_hard_timeout_of_the_decorator_only(
    client: JobClient, storage: MemoryStorage
) -> None:
    client.upsert_recurring("nightly", child_jobs.nightly, cron="0 3 * * *")
    assert client.trigger_recurring("nightly")
    (fired,) = storage.claim(
        ClaimRequest(
            worker_id="w", queues=frozenset({"default"}), max_count=1, lease=timedelta(minutes=1)
        )
    )
    assert fired.hard_timeout == timedelta(seconds=7)
    with pytest.raises(ValueError, match="hard timeout comes from @job"):
        client.upsert_recurring("other", child_jobs.hang.using(hard_timeout=3), cron="0 4 * * *")
