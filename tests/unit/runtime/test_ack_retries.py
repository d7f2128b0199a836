"""A completion that cannot be written is retried until its claim's lease ends, then
given up; the heartbeat keeps such a claim alive for one lease after the job finished,
never for good (Solid Queue #748), in fake time."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import timedelta

import pytest

from millrace_django.clock import FakeClock
from millrace_django.contract import ClaimRequest, JobState, JobTransition
from millrace_django.engine import EngineSettings, JobClient, JobContext, outcomes
from millrace_django.errors import StorageError
from millrace_django.runtime import acks
from millrace_django.runtime.acks import Acknowledger, Result
from millrace_django.runtime.heartbeat import Heartbeat
from millrace_django.runtime.inflight import Execution, InFlight
from millrace_django.storage.memory import MemoryStorage
from tests.unit.runtime import jobs
from tests.unit.runtime.helpers import steal, stored, wait_until

LEASE = timedelta(seconds=30)


class FailingStorage(MemoryStorage):
    """``apply_many`` raises while ``failing`` (the database is away); counts calls."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock)
        self.failing = True
        self.calls = 0

    def apply_many(self, transitions: Sequence[JobTransition]) -> list[bool | StorageError]:
        self.calls += 1
        if self.failing:
            raise ConnectionError("the database is away")
        return super().apply_many(transitions)


@pytest.fixture
def storage(clock: FakeClock) -> FailingStorage:
    return FailingStorage(clock)


@pytest.fixture(autouse=True)
def quick_retries(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(acks, "FIRST_RETRY", 0.001)
    monkeypatch.setattr(acks, "LONGEST_RETRY", 0.004)


def claimed(storage: FailingStorage, clock: FakeClock, count: int = 1) -> list[Execution]:
    client = JobClient(storage, clock, EngineSettings())
    for n in range(count):
        client.enqueue(jobs.record, str(n))
    return [Execution(job, JobContext.for_job(job, clock)) for job in steal(storage, clock, LEASE)]


def writer(
    storage: FailingStorage, clock: FakeClock, results: list[Result], turns: list[int]
) -> Acknowledger:
    """A started acknowledger appending to ``turns`` as each of its turns begins (where
    the host checks its connections)."""

    @contextmanager
    def turn() -> Iterator[None]:
        turns.append(storage.calls)
        yield

    started = Acknowledger(
        storage,
        clock,
        on_acknowledged=lambda done: results.extend(result for _, _, result in done),
        around_turn=turn,
        name="test-acks",
    )
    started.start()
    return started


def succeeded(execution: Execution, clock: FakeClock) -> JobTransition:
    return outcomes.succeeded(execution.job, None, clock=clock, config=EngineSettings())


def test_a_completion_the_storage_cannot_take_is_retried_until_the_lease_ends_then_given_up(
    storage: FailingStorage, clock: FakeClock
) -> None:
    (execution,) = claimed(storage, clock)
    results: list[Result] = []
    turns: list[int] = []
    acknowledger = writer(storage, clock, results, turns)
    try:
        acknowledger.submit(execution, succeeded(execution, clock))
        wait_until(lambda: storage.calls >= 3, "three tries")
        assert results == []  # still pending: its lease has not ended
        assert turns[:3] == [0, 1, 2]  # each try in a turn of its own
        clock.advance(LEASE)
        wait_until(lambda: results, "the transition to be given up")
    finally:
        acknowledger.close()
    (result,) = results
    assert isinstance(result, StorageError) and "end of its lease" in str(result)
    job = stored(storage, execution.job.id)
    assert (job.state, job.worker_id) == (JobState.PROCESSING, "thief")  # runs again later


def test_a_completion_retried_after_the_storage_came_back_is_written_once(
    storage: FailingStorage, clock: FakeClock
) -> None:
    (execution,) = claimed(storage, clock)
    results: list[Result] = []
    acknowledger = writer(storage, clock, results, [])
    try:
        acknowledger.submit(execution, succeeded(execution, clock))
        wait_until(lambda: storage.calls >= 2, "two tries")
        storage.failing = False
        wait_until(lambda: results, "the transition to be written")
    finally:
        acknowledger.close()
    assert results == [True]
    assert stored(storage, execution.job.id).state is JobState.SUCCEEDED


def test_a_completion_submitted_during_a_retry_pause_is_tried_within_its_own_lease(
    storage: FailingStorage, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(acks, "FIRST_RETRY", 60.0)  # the pause is then the lease's end
    monkeypatch.setattr(acks, "LONGEST_RETRY", 60.0)
    first, second = claimed(storage, clock, 2)
    results: list[Result] = []
    acknowledger = writer(storage, clock, results, [])
    try:
        acknowledger.submit(first, succeeded(first, clock))
        wait_until(lambda: storage.calls == 1, "the first try")  # next one in 30 s
        second.lease_until = clock.now() + timedelta(milliseconds=100)  # nearly over
        acknowledger.submit(second, succeeded(second, clock))
        wait_until(lambda: storage.calls >= 2, "a try before the second's lease ends", 2.0)
        clock.advance(timedelta(seconds=1))
        wait_until(lambda: results, "the second to be given up at its lease's end", 2.0)
    finally:
        acknowledger.close()
    assert isinstance(results[0], StorageError) and "end of its lease" in str(results[0])


def test_the_heartbeat_renews_a_finished_job_awaiting_its_write_for_one_lease_only(
    storage: FailingStorage, clock: FakeClock
) -> None:
    running, finished = claimed(storage, clock, 2)
    in_flight = InFlight()
    in_flight.add_all([running, finished])
    assert finished.settle(clock.now())  # its handler returned; its transition waits
    heartbeat = Heartbeat(storage, clock, in_flight, worker_id="thief", lease=LEASE)

    clock.advance(LEASE - timedelta(seconds=1))
    heartbeat.beat()
    renewed = clock.now() + LEASE
    assert stored(storage, finished.job.id).lease_until == finished.lease_until == renewed

    clock.advance(timedelta(seconds=1))  # a lease after it finished: no more renewals
    heartbeat.beat()
    assert stored(storage, running.job.id).lease_until == clock.now() + LEASE
    assert stored(storage, finished.job.id).lease_until == finished.lease_until == renewed


class LostAnswerStorage(FailingStorage):
    """``apply_many`` commits, then the same worker claims the given-back jobs again (its
    claim loop runs meanwhile), then the call raises as if the answer were lost."""

    def apply_many(self, transitions: Sequence[JobTransition]) -> list[bool | StorageError]:
        self.calls += 1
        results = super(FailingStorage, self).apply_many(transitions)
        if self.calls == 1:
            self.claim(
                ClaimRequest(
                    worker_id="thief", queues=frozenset({"default"}), max_count=10, lease=LEASE
                )
            )
            raise ConnectionError("the answer to the commit was lost")
        return results


def test_a_give_back_is_not_retried_since_the_next_claim_of_its_worker_has_its_fence(
    clock: FakeClock,
) -> None:
    storage = LostAnswerStorage(clock)
    (execution,) = claimed(storage, clock)
    results: list[Result] = []
    acknowledger = writer(storage, clock, results, [])
    try:
        acknowledger.submit(execution, outcomes.given_back(execution.job))
        wait_until(lambda: results, "the give-back to be given up")
    finally:
        acknowledger.close()
    (result,) = results
    assert isinstance(result, StorageError)
    assert storage.calls == 1
    job = stored(storage, execution.job.id)
    assert (job.state, job.worker_id, job.attempt) == (JobState.PROCESSING, "thief", 1)
