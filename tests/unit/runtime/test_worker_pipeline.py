"""The worker's pipeline: threads free at handler return, prefetch, paced threads, acks.

Claiming, running and acknowledging overlap; these tests pin down what that must not
change: every held job's lease is renewed, a prefetched job given back at shutdown spends
no budget and counts as no interruption, a cancel request reaches a job that has not
started, timeouts count from the start, and slow jobs are never parked locally.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import nullcontext
from dataclasses import replace
from datetime import timedelta
from typing import Any
from uuid import UUID

import pytest

from millrace_django.clock import FakeClock
from millrace_django.contract import ClaimRequest, JobState, JobTransition
from millrace_django.engine import EngineSettings, JobClient, JobContext, Retry, outcomes
from millrace_django.errors import StorageError
from millrace_django.runtime import RuntimeSettings, acks, job_pool
from millrace_django.runtime.acks import Acknowledger, Result
from millrace_django.runtime.inflight import Execution
from millrace_django.runtime.job_pool import JobPool
from millrace_django.storage.memory import MemoryStorage
from tests.unit.runtime import jobs
from tests.unit.runtime.conftest import StartWorker
from tests.unit.runtime.helpers import TIMEOUT, started, steal, stored, wait_for_state, wait_until
from tests.unit.runtime.jobs import board


class GatedStorage(MemoryStorage):
    """``apply_many`` waits for ``gate`` (acknowledgements stall; claims do not)."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock)
        self.gate = threading.Event()

    def apply_many(self, transitions: Sequence[JobTransition]) -> list[bool | StorageError]:
        self.gate.wait(TIMEOUT)
        return super().apply_many(transitions)


class CountingStorage(MemoryStorage):
    """Records the size of each ``apply_many`` batch."""

    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock)
        self.batches: list[int] = []

    def apply_many(self, transitions: Sequence[JobTransition]) -> list[bool | StorageError]:
        self.batches.append(len(transitions))
        return super().apply_many(transitions)


def enqueue_together(client: JobClient, *calls: tuple[Any, ...]) -> list[UUID]:
    """Enqueue several jobs in one storage call (one wake-up, one claim)."""
    records = [client.build(fn, args, {}, state=JobState.ENQUEUED, key=None) for fn, *args in calls]
    return client.storage.enqueue(records)


@pytest.fixture
def prefetching(
    client: JobClient, storage: MemoryStorage, start_worker: StartWorker
) -> Iterator[Any]:
    """A one-thread worker that has learnt its jobs are quick, so it prefetches."""
    warm = [jobs.record.enqueue(f"warm-{n}") for n in range(5)]
    thread = start_worker(concurrency=1)
    for job_id in warm:
        wait_for_state(storage, job_id, JobState.SUCCEEDED)
    wait_until(lambda: thread.worker.stats.in_flight == 0, "the warm-up to be written")
    yield thread.worker


def test_a_thread_runs_the_next_job_while_the_previous_one_awaits_its_write(
    clock: FakeClock, settings: RuntimeSettings, start_worker: StartWorker
) -> None:
    storage = GatedStorage(clock)
    client = JobClient(storage, clock, settings)
    first, second = (client.enqueue(jobs.record, label) for label in ("first", "second"))
    worker = start_worker(storage=storage, concurrency=1).worker
    wait_until(lambda: ("record", "second") in board.calls, "the second job to run")
    assert stored(storage, first).state is JobState.PROCESSING  # its write is still held up
    assert worker.stats.in_flight == 2  # both leases are still renewed meanwhile
    storage.gate.set()
    for job_id in (first, second):
        wait_for_state(storage, job_id, JobState.SUCCEEDED)


def test_without_a_known_pace_a_worker_claims_only_for_its_free_threads(
    client: JobClient, storage: MemoryStorage, start_worker: StartWorker
) -> None:
    ids = enqueue_together(client, (jobs.hold, "only"), (jobs.record, "a"), (jobs.record, "b"))
    worker = start_worker(concurrency=1).worker
    started("only")
    assert worker.stats.claimed == 1
    assert [stored(storage, job_id).state for job_id in ids[1:]] == [JobState.ENQUEUED] * 2
    board.event("only").set()
    for job_id in ids:
        wait_for_state(storage, job_id, JobState.SUCCEEDED)


def test_slow_jobs_are_not_prefetched(
    client: JobClient,
    storage: MemoryStorage,
    start_worker: StartWorker,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(job_pool, "PREFETCH_HORIZON", 1e-9)  # every job counts as slow
    # One thread: its first job does not count towards the pace.
    warm = [jobs.record.enqueue(f"warm-{n}") for n in range(job_pool.FIRST_DURATIONS + 1)]
    worker = start_worker(concurrency=1).worker
    for job_id in warm:  # the pace is known from here on
        wait_for_state(storage, job_id, JobState.SUCCEEDED)
    ids = enqueue_together(client, (jobs.hold, "slow"), (jobs.record, "a"), (jobs.record, "b"))
    started("slow")
    assert worker.stats.claimed == len(warm) + 1  # the warm-up and the running one
    assert [stored(storage, job_id).state for job_id in ids[1:]] == [JobState.ENQUEUED] * 2
    board.event("slow").set()


def test_quick_jobs_are_prefetched_and_every_held_lease_is_renewed(
    client: JobClient,
    storage: MemoryStorage,
    clock: FakeClock,
    settings: RuntimeSettings,
    prefetching: Any,
) -> None:
    worker = prefetching
    ids = enqueue_together(client, (jobs.hold, "front"), *[(jobs.record, str(n)) for n in range(4)])
    started("front")
    wait_until(lambda: worker.stats.in_flight == 5, "the queued jobs to be claimed too")
    assert {stored(storage, job_id).worker_id for job_id in ids} == {worker.worker_id}
    clock.advance(settings.heartbeat)
    worker.heartbeat()
    assert {stored(storage, job_id).lease_until for job_id in ids} == {clock.now() + settings.lease}
    board.event("front").set()
    for job_id in ids:
        wait_for_state(storage, job_id, JobState.SUCCEEDED)


def test_prefetched_jobs_are_given_back_at_once_on_shutdown_attempt_and_all(
    client: JobClient, storage: MemoryStorage, prefetching: Any
) -> None:
    worker = prefetching
    ids = enqueue_together(client, (jobs.hold, "front"), *[(jobs.record, str(n)) for n in range(3)])
    started("front")
    wait_until(lambda: worker.stats.in_flight == 4, "the queued jobs to be claimed too")
    worker.request_stop()
    for job_id in ids[1:]:
        job = wait_for_state(storage, job_id, JobState.ENQUEUED)
        assert (job.attempt, job.failures, job.worker_id) == (0, 0, None)  # no interruption
        details = storage.get_job_details(job_id)
        assert details is not None
        assert list(details.attempts) == []
    assert not [call for call in board.calls if call[0] == "record" and call[1].isdigit()]
    assert stored(storage, ids[0]).state is JobState.PROCESSING  # still draining
    board.event("front").set()
    wait_for_state(storage, ids[0], JobState.SUCCEEDED)
    wait_until(lambda: not worker.stats.in_flight, "the drain to finish")
    assert worker.stats.acknowledged[JobState.ENQUEUED] == 3


def test_a_cancel_request_reaches_a_job_that_has_not_started(
    client: JobClient,
    storage: MemoryStorage,
    clock: FakeClock,
    settings: RuntimeSettings,
    prefetching: Any,
) -> None:
    worker = prefetching
    front, waiting = enqueue_together(client, (jobs.hold, "front"), (jobs.record, "unwanted"))
    started("front")
    wait_until(lambda: worker.stats.in_flight == 2, "the queued job to be claimed too")
    assert client.cancel(waiting)
    clock.advance(settings.heartbeat)
    worker.heartbeat()
    job = wait_for_state(storage, waiting, JobState.CANCELLED)
    assert job.last_error == "Cancelled by request."
    board.event("front").set()
    wait_for_state(storage, front, JobState.SUCCEEDED)
    assert ("record", "unwanted") not in board.calls


def test_a_prefetched_jobs_timeout_counts_from_its_start(
    client: JobClient, storage: MemoryStorage, clock: FakeClock, prefetching: Any
) -> None:
    worker = prefetching
    timed = jobs.record.using(timeout=timedelta(seconds=5), retry=Retry.none())
    _, patient = enqueue_together(client, (jobs.hold, "front"), (timed, "patient"))
    started("front")
    wait_until(lambda: worker.stats.in_flight == 2, "the queued job to be claimed too")
    clock.advance(timedelta(seconds=60))  # far past its timeout, while it waits
    board.event("front").set()
    job = wait_for_state(storage, patient, JobState.SUCCEEDED)
    assert job.result == "patient"


def test_a_short_claim_waits_for_a_hint_instead_of_claiming_again(
    client: JobClient,
    storage: MemoryStorage,
    settings: RuntimeSettings,
    start_worker: StartWorker,
) -> None:
    slow_polls = replace(settings, poll_min=timedelta(seconds=30), poll_max=timedelta(seconds=60))
    worker = start_worker(config=slow_polls).worker
    wait_until(lambda: worker.stats.empty_claims == 1, "the first empty claim")
    for label in ("one", "two"):
        job_id = jobs.record.enqueue(label)  # each wakes the worker
        wait_for_state(storage, job_id, JobState.SUCCEEDED)
    assert worker.stats.empty_claims == 1


def test_a_stolen_prefetched_job_is_dropped_without_running(
    client: JobClient,
    storage: MemoryStorage,
    clock: FakeClock,
    settings: RuntimeSettings,
    prefetching: Any,
) -> None:
    worker = prefetching
    front, waiting = enqueue_together(client, (jobs.hold, "front"), (jobs.record, "taken"))
    started("front")
    wait_until(lambda: worker.stats.in_flight == 2, "the queued job to be claimed too")
    thief = steal(storage, clock, settings.lease)
    assert {job.id for job in thief} == {front, waiting}
    worker.heartbeat()  # both leases are gone
    board.event("front").set()
    wait_until(lambda: worker.stats.in_flight == 0, "both to be let go")
    assert ("record", "taken") not in board.calls
    assert stored(storage, waiting).worker_id == "thief"


# -- the pool ------------------------------------------------------------------------------


def executions(storage: MemoryStorage, clock: FakeClock, count: int) -> list[Execution]:
    """``count`` fresh jobs of ``storage``, claimed (as another worker would)."""
    client = JobClient(storage, clock, EngineSettings())
    ids = {client.enqueue(jobs.record, str(n)) for n in range(count)}
    claimed = storage.claim(
        ClaimRequest(
            worker_id="w", queues=frozenset({"default"}), max_count=count, lease=timedelta(hours=1)
        )
    )
    assert {job.id for job in claimed} == ids
    return [Execution(job, JobContext.for_job(job, clock)) for job in claimed]


class Runs:
    """A pool's ``run``: notes how many executions run at once."""

    def __init__(self, seconds: float = 0.0, block: set[UUID] | None = None) -> None:
        self.seconds = seconds
        self.block = block or set()
        self.gate = threading.Event()
        self.done: list[UUID] = []
        self.running = 0
        self.most = 0
        self._lock = threading.Lock()

    def __call__(self, execution: Execution) -> bool:
        with self._lock:
            self.running += 1
            self.most = max(self.most, self.running)
        if execution.job.id in self.block:
            self.gate.wait(TIMEOUT)
        elif self.seconds:
            time.sleep(self.seconds)  # waits like I/O, spending no CPU
        with self._lock:
            self.running -= 1
            self.done.append(execution.job.id)
        return True


@pytest.fixture
def pool_of() -> Iterator[Any]:
    pools: list[JobPool] = []

    def make(size: int, run: Runs, name: str = "test-job") -> JobPool:
        pool = JobPool(size, name, run)
        pool.start()
        pools.append(pool)
        return pool

    yield make
    for pool in pools:
        pool.close()


def test_jobs_that_wait_on_io_get_a_thread_each(
    storage: MemoryStorage, clock: FakeClock, pool_of: Any
) -> None:
    run = Runs(seconds=0.2)
    pool = pool_of(8, run)
    pool.submit(executions(storage, clock, 8))
    wait_until(lambda: len(run.done) == 8, "all of them to run")
    assert run.most == 8


def test_threads_grow_linearly_while_first_jobs_wait_for_an_import_and_stop_after(
    storage: MemoryStorage, clock: FakeClock, pool_of: Any
) -> None:
    batch = executions(storage, clock, 5_000)
    # In a new process, jobs wait for their module's import (here: a gate) at first.
    run = Runs(block={execution.job.id for execution in batch})
    pool = pool_of(250, run, name="importing")
    pool.submit(batch)
    wait_until(lambda: run.running >= job_pool.FIRST_THREADS, "the first jobs to start")
    began = time.perf_counter()
    time.sleep(10 * job_pool.STALL)  # the import takes a while: more threads try meanwhile
    run.gate.set()
    waited = time.perf_counter() - began
    wait_until(lambda: len(run.done) == len(batch), "the batch to run")
    started = len([t for t in threading.enumerate() if t.name.startswith("importing-")]) - 1
    # While they wait: the first few, a few more per WAKE_BUDGET (busy ones no longer
    # count as about to take work) and one per stall. Then none for the quick rest: a
    # pace taken from the import waits would put a thread on every queued job, and
    # doubling the threads per stall would reach 250 within 50 ms.
    linear = waited / job_pool.WAKE_BUDGET * job_pool.FIRST_THREADS + waited / job_pool.STALL
    assert started <= job_pool.FIRST_THREADS + linear + 5


def test_a_thread_stuck_in_a_long_job_does_not_hold_up_the_queue(
    storage: MemoryStorage, clock: FakeClock, pool_of: Any
) -> None:
    warm = executions(storage, clock, 20)
    run = Runs()
    pool = pool_of(4, run)
    pool.submit(warm)  # quick: the pool learns to put a single thread on its queue
    wait_until(lambda: len(run.done) == 20, "the warm-up")
    batch = executions(storage, clock, 5)
    run.block = {batch[0].job.id}
    pool.submit(batch)
    wait_until(lambda: len(run.done) == 24, "the others to run beside the stuck one")
    run.gate.set()
    wait_until(lambda: len(run.done) == 25, "the stuck one to return")


def test_holding_returns_what_never_started_and_starts_nothing_more(
    storage: MemoryStorage, clock: FakeClock, pool_of: Any
) -> None:
    batch = executions(storage, clock, 4)
    run = Runs(block={batch[0].job.id})
    pool = pool_of(1, run)
    pool.submit(batch)
    wait_until(lambda: run.running == 1, "the first to start")
    assert pool.hold() == batch[1:]
    run.gate.set()
    wait_until(lambda: run.done == [batch[0].job.id], "the first to return")
    assert pool.queued() == 0


def test_the_claim_window_is_free_threads_until_a_pace_is_known(
    storage: MemoryStorage, clock: FakeClock, pool_of: Any
) -> None:
    run = Runs()
    pool = pool_of(3, run)
    assert pool.demand(16) == (3, 0, 3)
    pool.submit(executions(storage, clock, 10))
    wait_until(lambda: len(run.done) == 10, "the jobs to run")
    want, queued, window = pool.demand(16)
    assert (want, queued) == (16, 0) and window == 3 + 2 * 16  # quick: two batches ahead


# -- acknowledgements ----------------------------------------------------------------------


def acknowledger(
    storage: MemoryStorage, clock: FakeClock, batch: int, results: list[Result]
) -> Acknowledger:
    acks_ = Acknowledger(
        storage,
        clock,
        on_acknowledged=lambda done: results.extend(result for _, _, result in done),
        around_turn=nullcontext,
        name="test-acks",
        batch=batch,
    )
    acks_.start()
    return acks_


def succeeded(execution: Execution, clock: FakeClock) -> JobTransition:
    return outcomes.succeeded(execution.job, None, clock=clock, config=EngineSettings())


def test_acknowledgements_linger_for_a_full_batch_while_more_jobs_are_queued(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(acks, "LINGER", 60.0)
    storage = CountingStorage(clock)
    results: list[Result] = []
    writer = acknowledger(storage, clock, 3, results)
    try:
        for execution in executions(storage, clock, 3):
            writer.submit(execution, succeeded(execution, clock), linger=True)
        wait_until(lambda: len(results) == 3, "the batch to be written")
        assert storage.batches == [3]
    finally:
        writer.close()


def test_an_acknowledgement_with_nothing_queued_behind_it_is_written_at_once(
    clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(acks, "LINGER", 60.0)
    storage = CountingStorage(clock)
    results: list[Result] = []
    writer = acknowledger(storage, clock, 64, results)
    try:
        first, last = executions(storage, clock, 2)
        writer.submit(first, succeeded(first, clock), linger=True)
        writer.submit(last, succeeded(last, clock))
        wait_until(lambda: len(results) == 2, "both to be written")
        assert sum(storage.batches) == 2 and results == [True, True]
    finally:
        writer.close()


def test_a_running_worker_appears_in_the_registry_and_heartbeats_refresh_it(
    client: JobClient,
    storage: MemoryStorage,
    clock: FakeClock,
    settings: RuntimeSettings,
    start_worker: StartWorker,
) -> None:
    thread = start_worker(tick=timedelta(minutes=1))
    wait_until(lambda: len(storage.list_workers()) == 1, "the worker to register")
    (row,) = storage.list_workers()
    assert row.worker_id == thread.worker.worker_id
    assert (row.concurrency, row.in_flight, row.seen_at) == (4, 0, clock.now())
    clock.advance(settings.heartbeat)
    thread.worker.heartbeat()
    (row,) = storage.list_workers()
    assert row.seen_at == clock.now()


def test_a_prefetched_job_whose_deadline_passes_while_it_waits_is_given_back_unstarted(
    client: JobClient, storage: MemoryStorage, clock: FakeClock, prefetching: Any
) -> None:
    worker = prefetching
    late = jobs.record.using(expires=timedelta(seconds=5))
    _, waiting = enqueue_together(client, (jobs.hold, "front"), (late, "late"))
    started("front")
    wait_until(lambda: worker.stats.in_flight == 2, "the queued job to be claimed too")
    clock.advance(timedelta(seconds=60))  # its deadline passes while it waits for a thread
    board.event("front").set()
    wait_until(lambda: worker.stats.in_flight == 0, "the late job to be let go")
    given_back = stored(storage, waiting)
    assert (given_back.state, given_back.attempt) == (JobState.ENQUEUED, 0)
    assert ("record", "late") not in board.calls
    assert storage.expire_due(clock.now(), 10) == 1  # the scheduler's sweep ends it
    assert stored(storage, waiting).state is JobState.CANCELLED


def test_an_interrupted_attempt_reclaimed_after_the_deadline_runs(
    client: JobClient,
    storage: MemoryStorage,
    clock: FakeClock,
    settings: RuntimeSettings,
    start_worker: StartWorker,
) -> None:
    job_id = jobs.record.enqueue("resumed", expires=timedelta(seconds=5))
    (crashed,) = storage.claim(
        ClaimRequest(
            worker_id="crashed", queues=frozenset({"default"}), max_count=1, lease=settings.lease
        )
    )
    assert crashed.id == job_id
    clock.advance(settings.lease + timedelta(seconds=1))  # past the lease and the deadline

    start_worker()

    job = wait_for_state(storage, job_id, JobState.SUCCEEDED)
    assert job.attempt == 2 and ("record", "resumed") in board.calls
