"""The test runner: runs jobs on the test's thread, in fake time, as the worker would."""

from __future__ import annotations

from datetime import timedelta
from typing import Any
from uuid import UUID

import pytest

from millrace_django import testing
from millrace_django.clock import FakeClock
from millrace_django.contract import Invocation, JobRecord, JobState, JobTransition
from millrace_django.engine import JobClient, default_client, outcomes
from millrace_django.ids import new_id
from millrace_django.runtime import RuntimeSettings
from millrace_django.storage.memory import MemoryStorage
from millrace_django.testing import JobFailed, JobRunner, RunawayJobs
from tests.unit.runtime import jobs
from tests.unit.runtime.conftest import StartWorker
from tests.unit.runtime.helpers import wait_for_state
from tests.unit.runtime.jobs import board


def test_run_until_idle_runs_every_claimable_job_and_counts_the_attempts(
    runner: JobRunner,
) -> None:
    parent = jobs.record.enqueue("parent")
    child = runner.client.continue_with(parent, jobs.record, "child")
    assert runner.run_until_idle() == 2
    assert runner.assert_succeeded(child).result == "child"
    assert runner.run_until_idle() == 0


def test_a_retry_waits_until_the_test_advances_the_clock(runner: JobRunner) -> None:
    job_id = jobs.flaky.enqueue("ok", 1)
    assert runner.run_until_idle() == 1
    runner.assert_state(job_id, JobState.FAILED)
    runner.advance(timedelta(seconds=9))
    assert runner.run_until_idle() == 0
    runner.advance(timedelta(seconds=1))
    runner.assert_state(job_id, JobState.ENQUEUED)  # advancing activates, it does not run
    assert runner.run_until_idle() == 1
    assert runner.assert_succeeded(job_id).failures == 1


def test_a_dead_job_raises_with_the_job_and_the_original_exception(runner: JobRunner) -> None:
    job_id = jobs.explode.enqueue("boom")
    with pytest.raises(JobFailed, match="RuntimeError: boom") as raised:
        runner.run_until_idle()
    assert raised.value.job.id == job_id and raised.value.job.state is JobState.DEAD
    assert isinstance(raised.value.__cause__, RuntimeError)


def test_a_keyboard_interrupt_is_recorded_as_the_jobs_failure_then_stops_the_run(
    runner: JobRunner,
) -> None:
    job_id = jobs.interrupt.enqueue("KeyboardInterrupt")
    with pytest.raises(KeyboardInterrupt):
        runner.run_until_idle()
    failed = runner.assert_state(job_id, JobState.FAILED)
    assert "KeyboardInterrupt: KeyboardInterrupt raised by the job" in (failed.last_error or "")


def test_without_throwing_a_dead_job_lets_its_failure_observer_run(runner: JobRunner) -> None:
    job_id = jobs.explode.enqueue("boom")
    assert runner.run_until_idle(throw_on_failure=False) == 2
    runner.assert_state(job_id, JobState.DEAD)
    assert board.calls == [("notify_ops", str(job_id))]


def test_due_recurring_definitions_fire_and_run(runner: JobRunner) -> None:
    runner.client.upsert_recurring("minutely", jobs.record, cron="* * * * *", args=["tick"])
    assert runner.run_until_idle() == 0
    runner.advance(timedelta(minutes=3))
    assert [job.recurring_id for job in runner.jobs(JobState.ENQUEUED)] == ["minutely"]
    assert runner.run_until_idle() == 1
    assert board.calls == [("record", "tick")]


def test_a_job_enqueueing_itself_forever_is_stopped(
    runner: JobRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(testing, "MAX_PASSES", 50)
    jobs.again.enqueue()
    with pytest.raises(RunawayJobs, match="enqueueing itself"):
        runner.run_until_idle()


def test_the_assertions_say_what_went_wrong(runner: JobRunner) -> None:
    job_id = jobs.explode.enqueue("boom")
    runner.run_until_idle(throw_on_failure=False)
    with pytest.raises(AssertionError, match=r"(?s)is dead, not succeeded; last error:\n.*boom"):
        runner.assert_succeeded(job_id)
    with pytest.raises(AssertionError, match="no job"):
        runner.get(new_id(runner.clock))
    assert [job.state for job in runner.jobs()] == [JobState.DEAD, JobState.SUCCEEDED]


def test_installing_a_runner_restores_the_previous_default_client(
    settings: RuntimeSettings,
) -> None:
    outer = JobRunner(config=settings)
    with outer.installed():
        with JobRunner(config=settings).installed() as inner:
            assert default_client() is inner.client
        assert default_client() is outer.client


def test_a_runner_over_given_storage_needs_its_clock(clock: FakeClock) -> None:
    with pytest.raises(ValueError, match="FakeClock"):
        JobRunner(MemoryStorage(clock))


def test_the_worker_and_the_runner_decide_with_the_same_outcome_rules(
    client: JobClient,
    storage: MemoryStorage,
    settings: RuntimeSettings,
    start_worker: StartWorker,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    deciders: list[str | None] = []
    rule = outcomes.succeeded

    def spy(job: JobRecord, result: object, **options: Any) -> JobTransition:
        deciders.append(job.worker_id)
        return rule(job, result, **options)

    monkeypatch.setattr(outcomes, "succeeded", spy)
    runner = JobRunner(config=settings)
    runner.client.enqueue(jobs.record, "by the runner")
    runner.run_until_idle()
    job_id = jobs.record.enqueue("by a worker")
    worker = start_worker().worker
    wait_for_state(storage, job_id, JobState.SUCCEEDED)
    assert deciders == [testing.RUNNER_ID, worker.worker_id]


type Ending = tuple[JobState, int, int, Any, str]


def _endings(storage: MemoryStorage, ids: list[UUID]) -> list[Ending]:
    """State, attempt, failures, result and the last line of the error of each job."""
    found = [storage.get_job(job_id) for job_id in ids]
    return [
        (job.state, job.attempt, job.failures, job.result, (job.last_error or "").split("\n")[-1])
        for job in found
        if job is not None
    ]


def _mixed_jobs(storage: MemoryStorage, clock: FakeClock, settings: RuntimeSettings) -> list[UUID]:
    """One of each ending: success, failure awaiting its retry, death, unrunnable."""
    broken = JobRecord(
        id=new_id(clock),
        queue="default",
        invocation=Invocation(target="tests.unit.runtime.jobs:vanished"),
        state=JobState.ENQUEUED,
        created_at=clock.now(),
    )
    with JobRunner(storage, clock, settings).installed():
        return [
            jobs.record.enqueue("fine"),
            jobs.flaky.enqueue("later", 1),
            jobs.explode.enqueue("boom"),
            *storage.enqueue([broken]),
        ]


def test_the_worker_and_the_runner_agree_on_every_outcome(
    storage: MemoryStorage,
    clock: FakeClock,
    settings: RuntimeSettings,
    start_worker: StartWorker,
) -> None:
    runner_clock = FakeClock()
    runner_storage = MemoryStorage(runner_clock)
    ran = _mixed_jobs(runner_storage, runner_clock, settings)
    JobRunner(runner_storage, runner_clock, settings).run_until_idle(throw_on_failure=False)
    expected = _endings(runner_storage, ran)
    worked = _mixed_jobs(storage, clock, settings)
    start_worker()
    for job_id, (state, *_) in zip(worked, expected, strict=True):
        wait_for_state(storage, job_id, state)
    assert _endings(storage, worked) == expected
    assert [ending[0] for ending in expected] == [
        JobState.SUCCEEDED,
        JobState.FAILED,
        JobState.DEAD,
        JobState.DEAD,
    ]
