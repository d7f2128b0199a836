"""The worker runs claimed jobs to the same outcomes the engine's rules prescribe."""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import timedelta

import pytest

from millrace_django.clock import FakeClock
from millrace_django.contract import Invocation, JobRecord, JobState
from millrace_django.engine import JobClient, UnknownQueue
from millrace_django.ids import new_id
from millrace_django.runtime import RuntimeSettings, Scheduler, Worker
from millrace_django.storage.memory import MemoryStorage
from tests.unit.runtime import jobs
from tests.unit.runtime.conftest import StartWorker
from tests.unit.runtime.helpers import (
    started,
    steal,
    stored,
    wait_for_state,
    wait_until,
)
from tests.unit.runtime.jobs import board


def test_an_enqueued_job_runs_to_success_with_its_result(
    client: JobClient, storage: MemoryStorage, start_worker: StartWorker
) -> None:
    job_id = jobs.record.enqueue("hello")
    thread = start_worker()
    job = wait_for_state(storage, job_id, JobState.SUCCEEDED)
    assert (job.result, job.attempt, job.failures, job.worker_id) == ("hello", 1, 0, None)
    wait_until(lambda: thread.worker.stats.in_flight == 0, "the slot to be freed")
    assert thread.worker.stats.acknowledged == {JobState.SUCCEEDED: 1}


def test_a_failing_job_is_retried_when_due_and_then_succeeds(
    client: JobClient,
    storage: MemoryStorage,
    clock: FakeClock,
    settings: RuntimeSettings,
    start_worker: StartWorker,
) -> None:
    job_id = jobs.flaky.enqueue("ok", 1)
    start_worker()
    failed = wait_for_state(storage, job_id, JobState.FAILED)
    assert failed.failures == 1 and "attempt 1 fails" in (failed.last_error or "")
    clock.advance(timedelta(seconds=10))
    Scheduler(storage, clock, settings).run_once()
    job = wait_for_state(storage, job_id, JobState.SUCCEEDED)
    assert (job.attempt, job.failures, job.result) == (2, 1, "ok")


def test_a_job_that_keeps_failing_dies_and_its_failure_observer_runs(
    client: JobClient, storage: MemoryStorage, start_worker: StartWorker
) -> None:
    job_id = jobs.explode.enqueue("boom")
    start_worker()
    job = wait_for_state(storage, job_id, JobState.DEAD)
    assert job.failures == 1 and "RuntimeError: boom" in (job.last_error or "")
    wait_until(lambda: ("notify_ops", str(job_id)) in board.calls, "the observer to run")


def test_a_continuation_runs_after_its_parent_succeeds(
    client: JobClient, storage: MemoryStorage, start_worker: StartWorker
) -> None:
    parent = jobs.record.enqueue("parent")
    child = client.continue_with(parent, jobs.record, "child")
    start_worker()
    wait_for_state(storage, child, JobState.SUCCEEDED)
    assert [call for call in board.calls if call[0] == "record"] == [
        ("record", "parent"),
        ("record", "child"),
    ]


def test_a_scheduled_job_runs_once_the_scheduler_finds_it_due(
    client: JobClient,
    storage: MemoryStorage,
    clock: FakeClock,
    settings: RuntimeSettings,
    start_worker: StartWorker,
) -> None:
    job_id = jobs.record.schedule("later", delay=timedelta(minutes=5))
    start_worker()
    scheduler = Scheduler(storage, clock, settings)
    assert scheduler.run_once().activated == 0
    clock.advance(timedelta(minutes=5))
    assert scheduler.run_once().activated == 1
    assert wait_for_state(storage, job_id, JobState.SUCCEEDED).result == "later"


def test_an_async_job_runs_on_the_workers_event_loop(
    client: JobClient, storage: MemoryStorage, start_worker: StartWorker
) -> None:
    job_id = jobs.async_double.enqueue(21)
    start_worker()
    job = wait_for_state(storage, job_id, JobState.SUCCEEDED)
    assert job.result == {"value": 42, "thread": "millrace-asyncio"}


def test_an_unrunnable_job_dies_at_once_and_the_worker_keeps_going(
    client: JobClient, storage: MemoryStorage, clock: FakeClock, start_worker: StartWorker
) -> None:
    def stored_job(invocation: Invocation) -> JobRecord:
        return JobRecord(
            id=new_id(clock),
            queue="default",
            invocation=invocation,
            state=JobState.ENQUEUED,
            created_at=clock.now(),
        )

    vanished, misfit = storage.enqueue(
        [
            stored_job(Invocation(target="tests.unit.runtime.jobs:vanished")),
            stored_job(Invocation(target=jobs.record.target, kwargs={"nope": 1})),
        ]
    )
    fine = jobs.record.enqueue("still running")
    start_worker()
    assert wait_for_state(storage, fine, JobState.SUCCEEDED).result == "still running"
    for job_id, message in ((vanished, "has no job 'vanished'"), (misfit, "no longer fit")):
        job = wait_for_state(storage, job_id, JobState.DEAD)
        assert (job.attempt, job.failures) == (1, 1)
        assert message in (job.last_error or "")


def test_a_poison_pill_dies_without_running(
    client: JobClient,
    storage: MemoryStorage,
    clock: FakeClock,
    settings: RuntimeSettings,
    start_worker: StartWorker,
) -> None:
    job_id = jobs.record.enqueue("poison")
    for _ in range(2):
        assert steal(storage, clock, settings.lease)
    clock.advance(settings.lease + timedelta(seconds=1))
    start_worker(config=replace(settings, interruption_limit=2))
    job = wait_for_state(storage, job_id, JobState.DEAD)
    assert (job.attempt, job.failures) == (3, 0)
    assert re.match(
        r"Poison-pill: claimed 3 times with only 0 recorded failures", job.last_error or ""
    )
    assert board.calls == []


def test_progress_and_logs_are_stored_by_the_heartbeat_and_before_the_transition(
    client: JobClient, storage: MemoryStorage, clock: FakeClock, start_worker: StartWorker
) -> None:
    job_id = jobs.report.enqueue("r")
    start_worker()
    started("r")
    clock.advance(timedelta(seconds=10))
    wait_until(lambda: stored(storage, job_id).progress == 0.5, "the heartbeat to store progress")
    board.event("r").set()
    wait_for_state(storage, job_id, JobState.SUCCEEDED)
    details = storage.get_job_details(job_id)
    assert details is not None
    assert [line.message for line in details.logs] == ["half way"]


def test_each_worker_gets_its_own_id_naming_host_and_process(
    storage: MemoryStorage, clock: FakeClock, settings: RuntimeSettings
) -> None:
    first, second = (Worker(storage, clock, settings) for _ in range(2))
    assert first.worker_id != second.worker_id
    assert re.fullmatch(r"[^:]+:\d+:[0-9a-f]{32}", first.worker_id)


def test_a_worker_refuses_queues_outside_the_settings(
    storage: MemoryStorage, clock: FakeClock, settings: RuntimeSettings
) -> None:
    with pytest.raises(UnknownQueue):
        Worker(storage, clock, settings, queues=["reports"])
    with pytest.raises(ValueError, match="lease"):
        Worker(storage, clock, replace(settings, lease=settings.heartbeat))


def test_a_worker_claims_only_from_its_own_queues(
    client: JobClient, storage: MemoryStorage, start_worker: StartWorker
) -> None:
    elsewhere = client.enqueue(jobs.record.using(queue="emails"), "not mine")
    mine = jobs.record.enqueue("mine")
    start_worker(queues=["default"])
    wait_for_state(storage, mine, JobState.SUCCEEDED)
    assert stored(storage, elsewhere).state is JobState.ENQUEUED


def test_until_idle_stops_the_worker_once_nothing_is_claimable(
    client: JobClient, storage: MemoryStorage, start_worker: StartWorker
) -> None:
    parent = jobs.record.enqueue("one")
    child = client.continue_with(parent, jobs.record, "two")
    thread = start_worker(until_idle=True)
    thread.join()
    assert stored(storage, child).state is JobState.SUCCEEDED
