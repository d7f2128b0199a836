"""Claiming promptly (notifications, adaptive polling) and acknowledging in batches."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import replace
from datetime import timedelta

from millrace_django.clock import FakeClock
from millrace_django.contract import Capabilities, JobState, JobTransition
from millrace_django.engine import EngineSettings, JobClient, JobContext, outcomes
from millrace_django.errors import StorageError
from millrace_django.runtime import RuntimeSettings
from millrace_django.runtime.acks import Acknowledger, Result
from millrace_django.runtime.inflight import Execution
from millrace_django.runtime.polling import Backoff, Wakeup
from millrace_django.storage.memory import MemoryStorage
from tests.unit.runtime import jobs
from tests.unit.runtime.conftest import StartWorker
from tests.unit.runtime.helpers import TIMEOUT, steal, wait_for_state, wait_until


class CountingStorage(MemoryStorage):
    """Records each ``apply_many`` batch; single ``apply`` calls are a test failure."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock)
        self.batches: list[int] = []

    def apply(self, transition: JobTransition) -> bool:
        raise AssertionError("the worker acknowledges through apply_many only")

    def apply_many(self, transitions: Sequence[JobTransition]) -> list[bool | StorageError]:
        self.batches.append(len(transitions))
        return [MemoryStorage.apply(self, t) for t in transitions]


class SilentStorage(MemoryStorage):
    """A provider without notifications."""

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities.NONE


def test_the_poll_delay_doubles_up_to_its_ceiling_and_resets() -> None:
    backoff = Backoff(timedelta(milliseconds=200), timedelta(seconds=1))
    assert [backoff.next() for _ in range(5)] == [0.2, 0.4, 0.8, 1.0, 1.0]
    backoff.reset()
    assert backoff.next() == 0.2


def test_a_job_enqueued_after_an_empty_poll_is_picked_up_well_before_the_poll_ceiling(
    client: JobClient,
    storage: MemoryStorage,
    settings: RuntimeSettings,
    start_worker: StartWorker,
) -> None:
    slow_polls = replace(settings, poll_min=timedelta(seconds=30), poll_max=timedelta(seconds=60))
    worker = start_worker(config=slow_polls).worker
    wait_until(lambda: worker.stats.empty_claims == 1, "the first empty claim")
    job_id = jobs.record.enqueue("woken")
    wait_for_state(storage, job_id, JobState.SUCCEEDED)  # waits at most TIMEOUT, not 30 s


def test_a_hint_arriving_while_a_claim_is_in_flight_is_not_lost(
    client: JobClient, storage: MemoryStorage
) -> None:
    wakeup = Wakeup(storage, {"default"}, "test-wakeup")
    wakeup.start()
    try:
        assert wakeup.listening
        wakeup.clear()  # the claim loop clears, then claims...
        jobs.record.enqueue("meanwhile")  # ...and a job arrives during the round trip
        assert wakeup.wait(TIMEOUT)  # so the next wait returns at once
    finally:
        wakeup.close()


def test_without_notifications_the_worker_only_polls(clock: FakeClock) -> None:
    wakeup = Wakeup(SilentStorage(clock), {"default"}, "test-wakeup")
    wakeup.start()
    assert not wakeup.listening
    assert not wakeup.wait(0)


def test_finished_jobs_are_acknowledged_together_in_one_apply_many_call(clock: FakeClock) -> None:
    storage = CountingStorage(clock)
    config = EngineSettings()
    client = JobClient(storage, clock, config)
    for label in ("a", "b", "c"):
        client.enqueue(jobs.record, label)
    claimed = steal(storage, clock, timedelta(seconds=30))
    acknowledged: list[tuple[JobState | None, Result]] = []
    acks = Acknowledger(
        storage,
        clock,
        on_acknowledged=lambda batch: acknowledged.extend(
            (t.target if t else None, result) for _, t, result in batch
        ),
        around_turn=nullcontext,
        name="test-acks",
    )
    for job in claimed:
        execution = Execution(job, JobContext.for_job(job, clock))
        acks.submit(execution, outcomes.succeeded(job, None, clock=clock, config=config))
    assert acks.flush() == 3
    assert storage.batches == [3]
    assert acknowledged == [(JobState.SUCCEEDED, True)] * 3


def test_a_transition_whose_fence_was_lost_is_reported_and_changes_nothing(
    clock: FakeClock,
) -> None:
    storage = CountingStorage(clock)
    config = EngineSettings()
    JobClient(storage, clock, config).enqueue(jobs.record, "a")
    (mine,) = steal(storage, clock, timedelta(seconds=30))
    (theirs,) = steal(storage, clock, timedelta(seconds=30))
    results: list[Result] = []
    acks = Acknowledger(
        storage,
        clock,
        on_acknowledged=lambda batch: results.extend(result for _, _, result in batch),
        around_turn=nullcontext,
        name="test-acks",
    )
    execution = Execution(mine, JobContext.for_job(mine, clock))
    acks.submit(execution, outcomes.succeeded(mine, None, clock=clock, config=config))
    acks.flush()
    assert results == [False]
    job = storage.get_job(mine.id)
    assert job is not None and (job.state, job.attempt) == (JobState.PROCESSING, theirs.attempt)


def test_an_attempt_finishing_after_the_acknowledger_stopped_is_still_written(
    clock: FakeClock,
) -> None:
    storage = CountingStorage(clock)
    config = EngineSettings()
    JobClient(storage, clock, config).enqueue(jobs.record, "late")
    (job,) = steal(storage, clock, timedelta(seconds=30))
    results: list[Result] = []
    acks = Acknowledger(
        storage,
        clock,
        on_acknowledged=lambda batch: results.extend(result for _, _, result in batch),
        around_turn=nullcontext,
        name="test-acks",
    )
    acks.start()
    acks.close()
    execution = Execution(job, JobContext.for_job(job, clock))
    acks.submit(execution, outcomes.succeeded(job, "late", clock=clock, config=config))
    assert results == [True]


def test_the_worker_writes_every_outcome_through_apply_many(
    clock: FakeClock, settings: RuntimeSettings, start_worker: StartWorker
) -> None:
    storage = CountingStorage(clock)
    client = JobClient(storage, clock, settings)
    ids = [client.enqueue(jobs.record, str(n)) for n in range(20)]
    start_worker(storage=storage)
    for job_id in ids:
        wait_for_state(storage, job_id, JobState.SUCCEEDED)
    assert sum(storage.batches) == 20


def test_a_slot_freed_by_a_limited_job_is_claimed_again_without_the_poll_delay(
    client: JobClient,
    storage: MemoryStorage,
    settings: RuntimeSettings,
    start_worker: StartWorker,
) -> None:
    """Jobs held back by a concurrency limit of 1 run one after the other: each one's
    acknowledgement wakes the claim loop, which would otherwise wait out a 30 s poll."""
    slow_polls = replace(settings, poll_min=timedelta(seconds=30), poll_max=timedelta(seconds=60))
    ids = [jobs.record.using(concurrency=1).enqueue(f"limited {n}") for n in range(3)]
    start_worker(config=slow_polls)
    for job_id in ids:
        wait_for_state(storage, job_id, JobState.SUCCEEDED)  # at most TIMEOUT each
