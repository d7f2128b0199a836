"""A job's last chance runs alone: the rest of its claim is given back (attempt and all,
so it costs nothing), what the worker already holds finishes first, nothing is claimed
until it is written.

A crash cannot be simulated in this process, so these tests check the mechanics: who is
given back (and that it costs nothing), who waits, who runs with whom, and stopping
meanwhile.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import replace
from datetime import timedelta
from uuid import UUID

import pytest

from millrace_django.clock import FakeClock
from millrace_django.contract import AttemptOutcome, ClaimRequest, JobQuery, JobState
from millrace_django.engine import EngineSettings, JobClient, default_client, job, outcomes
from millrace_django.runtime import RuntimeSettings
from millrace_django.runtime.quarantine import on_last_chance
from millrace_django.storage.memory import MemoryStorage
from tests.unit.runtime import jobs
from tests.unit.runtime.conftest import StartWorker
from tests.unit.runtime.helpers import (
    WorkerThread,
    started,
    steal,
    stored,
    wait_for_state,
    wait_until,
)
from tests.unit.runtime.jobs import WAIT, board

CRASHED_LEASE = timedelta(seconds=1)
"""The lease of the claims a crashed worker made (see :func:`crash_holding`)."""

QUIET = 0.1
"""Real seconds in which the worker would have claimed or started more, were it allowed."""


def processing() -> frozenset[UUID]:
    """The jobs the storage shows claimed right now."""
    page = default_client().storage.query_jobs(JobQuery(states=frozenset({JobState.PROCESSING})))
    return frozenset(summary.id for summary in page.items)


@job
def gated(name: str) -> str:
    """Notes the jobs claimed when it starts, then runs until the gate ``name`` opens."""
    board.record("start", name, processing())
    board.event(f"{name}:started").set()
    board.event(name).wait(WAIT)
    board.record("end", name)
    return name


@job
async def gated_async(name: str) -> str:
    """:func:`gated` as a coroutine, noting the thread it runs on."""
    board.record("start", name, processing())
    board.record("thread", name, threading.current_thread().name)
    board.event(f"{name}:started").set()
    gate = board.event(name)
    for _ in range(int(WAIT / 0.002)):
        if gate.is_set():
            break
        await asyncio.sleep(0.002)
    board.record("end", name)
    return name


def crash_holding(storage: MemoryStorage, clock: FakeClock) -> None:
    """Claim every claimable job as a worker that dies holding them: each is charged an
    interruption when its lease (:data:`CRASHED_LEASE`) lapses and it is claimed again."""
    assert steal(storage, clock, CRASHED_LEASE)


def lapse(clock: FakeClock) -> None:
    """Let the crashed worker's leases lapse."""
    clock.advance(2 * CRASHED_LEASE)


def limit(settings: RuntimeSettings, interruption_limit: int) -> RuntimeSettings:
    return replace(settings, interruption_limit=interruption_limit)


def suspect_running_alone(
    storage: MemoryStorage, clock: FakeClock, start_worker: StartWorker, config: RuntimeSettings
) -> tuple[UUID, UUID, WorkerThread]:
    """A worker claims ``suspect`` back on its last chance together with ``other``;
    returns (suspect, other, the worker's thread) once the suspect runs alone and
    ``other`` has been given back."""
    suspect = gated.enqueue("suspect")
    crash_holding(storage, clock)
    lapse(clock)
    other = jobs.record.enqueue("other")
    thread = start_worker(config=config)
    started("suspect")
    given_back(storage, other, crashes=0)
    return suspect, other, thread


def suspect_behind_a_running_job(
    storage: MemoryStorage, clock: FakeClock, settings: RuntimeSettings, start_worker: StartWorker
) -> tuple[UUID, UUID, WorkerThread]:
    """A worker runs ``early`` when it claims ``suspect`` back on its last chance; returns
    (suspect, early, the worker's thread) once the suspect has been held, not started,
    for long enough to have started were it allowed."""
    suspect = gated.enqueue("suspect")
    crash_holding(storage, clock)
    early = gated.enqueue("early")
    thread = start_worker(config=limit(settings, 2))
    started("early")
    lapse(clock)  # the next claim takes the suspect back, on its last chance
    wait_until(
        lambda: stored(storage, suspect).worker_id == thread.worker.worker_id,
        "the suspect claimed by the worker",
    )
    time.sleep(QUIET)  # time enough to start it, were it allowed
    assert not board.event("suspect:started").is_set()
    return suspect, early, thread


def back_in_queue(storage: MemoryStorage, job_id: UUID, attempt: int, interruptions: int) -> None:
    """Wait until ``job_id`` is enqueued again at ``attempt``, no failure spent, with
    ``interruptions`` (and nothing else) in its history."""
    wait_until(
        lambda: (
            (stored(storage, job_id).state, stored(storage, job_id).attempt)
            == (JobState.ENQUEUED, attempt)
        ),
        f"job {job_id} enqueued again at attempt {attempt}",
    )
    job = stored(storage, job_id)
    assert (job.failures, job.worker_id, job.lease_until) == (0, None, None)
    details = storage.get_job_details(job_id)
    assert details is not None
    assert [a.outcome for a in details.attempts] == [AttemptOutcome.INTERRUPTED] * interruptions


def given_back(storage: MemoryStorage, job_id: UUID, crashes: int) -> None:
    """Wait until ``job_id`` is given back: its claim undone, so it is enqueued at the
    attempt its crashes left it and they alone are in its history."""
    back_in_queue(storage, job_id, attempt=crashes, interruptions=crashes)


def released(storage: MemoryStorage, job_id: UUID, attempt: int) -> None:
    """Wait until ``job_id``, which ran, is released: charged an interruption like a
    crash, it keeps the attempt it ran as."""
    back_in_queue(storage, job_id, attempt=attempt, interruptions=attempt)


@pytest.mark.parametrize(
    ("attempt", "failures", "interruption_limit", "cancel_requested", "expected"),
    [
        (2, 0, 2, False, True),  # interrupted once; one more makes it a poison pill
        (4, 2, 2, False, True),  # failures do not count as interruptions
        (1, 0, 2, False, False),  # never interrupted
        (3, 0, 3, False, True),
        (2, 0, 3, False, False),  # below its last chance: the fast path
        (3, 0, 2, False, False),  # already a poison pill: judged without running
        (2, 0, 2, True, False),  # cancelled without running
        (1, 0, 1, False, False),  # never interrupted, whatever the limit
    ],
)
def test_a_job_is_on_its_last_chance_when_interrupted_and_one_short_of_the_verdict(
    client: JobClient,
    attempt: int,
    failures: int,
    interruption_limit: int,
    cancel_requested: bool,
    expected: bool,
) -> None:
    built = client.build(jobs.record, ("x",), {}, state=JobState.PROCESSING, key=None)
    claimed = replace(built, attempt=attempt, failures=failures, cancel_requested=cancel_requested)
    assert on_last_chance(claimed, interruption_limit) is expected


def test_a_last_chance_job_runs_alone_and_the_rest_of_its_claim_is_given_back(
    client: JobClient,
    storage: MemoryStorage,
    clock: FakeClock,
    settings: RuntimeSettings,
    start_worker: StartWorker,
) -> None:
    suspect = gated.enqueue("suspect")
    crash_holding(storage, clock)
    lapse(clock)
    others = [jobs.record.enqueue(label) for label in ("a", "b", "c")]
    thread = start_worker(config=limit(settings, 2))  # one claim of 4 takes all four
    started("suspect")
    for job_id in others:
        given_back(storage, job_id, crashes=0)
    time.sleep(QUIET)  # time enough to claim them again, were it allowed
    assert thread.worker.stats.claimed == 4
    assert board.calls == [("start", "suspect", frozenset({suspect}))]

    board.event("suspect").set()
    for job_id in others:
        assert wait_for_state(storage, job_id, JobState.SUCCEEDED).attempt == 1
    assert wait_for_state(storage, suspect, JobState.SUCCEEDED).attempt == 2
    calls = board.calls
    assert calls[:2] == [("start", "suspect", frozenset({suspect})), ("end", "suspect")]
    assert sorted(calls[2:]) == [("record", "a"), ("record", "b"), ("record", "c")]


def test_jobs_already_held_finish_and_are_written_before_a_last_chance_job_starts(
    client: JobClient,
    storage: MemoryStorage,
    clock: FakeClock,
    settings: RuntimeSettings,
    start_worker: StartWorker,
) -> None:
    suspect, early, _ = suspect_behind_a_running_job(storage, clock, settings, start_worker)
    assert stored(storage, suspect).attempt == 2  # held meanwhile, not given back

    board.event("early").set()
    started("suspect")
    assert board.calls == [
        ("start", "early", frozenset({early, suspect})),
        ("end", "early"),
        ("start", "suspect", frozenset({suspect})),  # early's success written before
    ]
    assert stored(storage, early).state is JobState.SUCCEEDED
    board.event("suspect").set()
    assert wait_for_state(storage, suspect, JobState.SUCCEEDED).attempt == 2


def test_of_several_last_chance_jobs_in_one_claim_the_first_runs_alone_the_others_go_back(
    client: JobClient,
    storage: MemoryStorage,
    clock: FakeClock,
    settings: RuntimeSettings,
    start_worker: StartWorker,
) -> None:
    """Giving back costs no interruption, so the second last-chance job goes back to the
    queue uncharged and, claimed again once the first is written, has its own turn."""
    first, second = gated.enqueue("first"), gated.enqueue("second")
    crash_holding(storage, clock)
    lapse(clock)
    fresh = jobs.record.enqueue("fresh")
    start_worker(config=limit(settings, 2))
    started("first")
    given_back(storage, second, crashes=1)  # still on its last chance, not past it
    given_back(storage, fresh, crashes=0)
    time.sleep(QUIET)  # time enough to claim them again, were it allowed
    assert not board.event("second:started").is_set()

    board.event("first").set()
    started("second")
    board.event("second").set()
    for job_id, attempt in ((first, 2), (second, 2), (fresh, 1)):
        assert wait_for_state(storage, job_id, JobState.SUCCEEDED).attempt == attempt
    assert board.calls == [
        ("start", "first", frozenset({first})),
        ("end", "first"),
        ("start", "second", frozenset({second})),  # fresh given back once more meanwhile
        ("end", "second"),
        ("record", "fresh"),
    ]


def test_a_job_given_back_can_be_claimed_by_another_worker_at_once(
    client: JobClient,
    storage: MemoryStorage,
    clock: FakeClock,
    settings: RuntimeSettings,
    start_worker: StartWorker,
) -> None:
    suspect, other, _ = suspect_running_alone(storage, clock, start_worker, limit(settings, 2))

    request = ClaimRequest(
        worker_id="neighbour", queues=frozenset({"default"}), max_count=10, lease=CRASHED_LEASE
    )
    (taken,) = storage.claim(request)  # while the suspect still runs
    assert (taken.id, taken.attempt, taken.failures) == (other, 1, 0)
    done = outcomes.succeeded(taken, "by the neighbour", clock=clock, config=EngineSettings())
    assert storage.apply(done)
    board.event("suspect").set()
    assert wait_for_state(storage, suspect, JobState.SUCCEEDED).attempt == 2
    assert stored(storage, other).result == "by the neighbour"
    assert ("record", "other") not in board.calls


def test_jobs_of_the_claim_decided_without_running_are_judged_not_given_back(
    client: JobClient,
    storage: MemoryStorage,
    clock: FakeClock,
    settings: RuntimeSettings,
    start_worker: StartWorker,
) -> None:
    doomed = jobs.record.enqueue("doomed")
    crash_holding(storage, clock)
    lapse(clock)
    cancelled = jobs.record.enqueue("cancelled")
    suspect = gated.enqueue("suspect")
    crash_holding(storage, clock)
    assert storage.try_cancel(cancelled)
    lapse(clock)
    start_worker(config=limit(settings, 2))  # claims doomed (3), cancelled (2), suspect (2)
    started("suspect")
    dead = stored(storage, doomed)
    assert (dead.state, dead.attempt) == (JobState.DEAD, 3)
    assert (dead.last_error or "").startswith("Poison-pill: claimed 3 times")
    details = storage.get_job_details(doomed)
    assert details is not None
    assert [a.attempt for a in details.attempts] == [2, 1]  # the two crashes, no release
    gone = stored(storage, cancelled)
    assert (gone.state, gone.attempt) == (JobState.CANCELLED, 2)
    assert board.calls == [("start", "suspect", frozenset({suspect}))]
    board.event("suspect").set()
    wait_for_state(storage, suspect, JobState.SUCCEEDED)


def test_below_the_last_chance_a_reclaimed_job_runs_with_the_others(
    client: JobClient,
    storage: MemoryStorage,
    clock: FakeClock,
    settings: RuntimeSettings,
    start_worker: StartWorker,
) -> None:
    returning = gated.enqueue("returning")
    crash_holding(storage, clock)
    lapse(clock)
    fresh = [gated.enqueue(name) for name in ("x", "y")]
    thread = start_worker(config=limit(settings, 3))  # interrupted once of three
    for name in ("returning", "x", "y"):
        started(name)  # all at once: no gate is open
    assert thread.worker.stats.claimed == 3
    board.open_all()
    for job_id in (returning, *fresh):
        wait_for_state(storage, job_id, JobState.SUCCEEDED)


def test_a_job_never_interrupted_is_no_suspect_even_with_a_limit_of_one(
    client: JobClient, storage: MemoryStorage, settings: RuntimeSettings, start_worker: StartWorker
) -> None:
    ids = [gated.enqueue(name) for name in ("x", "y")]
    start_worker(config=limit(settings, 1))
    started("x")
    started("y")
    board.open_all()
    for job_id in ids:
        wait_for_state(storage, job_id, JobState.SUCCEEDED)


def test_an_async_last_chance_job_runs_alone_on_the_event_loop(
    client: JobClient,
    storage: MemoryStorage,
    clock: FakeClock,
    settings: RuntimeSettings,
    start_worker: StartWorker,
) -> None:
    suspect = gated_async.enqueue("suspect")
    crash_holding(storage, clock)
    lapse(clock)
    others = [jobs.record.enqueue(label) for label in ("a", "b")]
    start_worker(config=limit(settings, 2))
    started("suspect")
    for job_id in others:
        given_back(storage, job_id, crashes=0)
    assert board.calls == [
        ("start", "suspect", frozenset({suspect})),
        ("thread", "suspect", "millrace-asyncio"),
    ]
    board.event("suspect").set()
    assert wait_for_state(storage, suspect, JobState.SUCCEEDED).attempt == 2
    for job_id in others:
        assert wait_for_state(storage, job_id, JobState.SUCCEEDED).attempt == 1


# -- stopping during a quarantine -----------------------------------------------------------


def test_a_stop_gives_back_a_last_chance_job_still_waiting_for_its_turn(
    client: JobClient,
    storage: MemoryStorage,
    clock: FakeClock,
    settings: RuntimeSettings,
    start_worker: StartWorker,
) -> None:
    suspect, early, thread = suspect_behind_a_running_job(storage, clock, settings, start_worker)
    thread.worker.request_stop()
    given_back(storage, suspect, crashes=1)  # at once, while early still runs
    assert thread.alive
    board.event("early").set()
    thread.join()
    assert stored(storage, early).state is JobState.SUCCEEDED
    assert not board.event("suspect:started").is_set()


def test_a_graceful_stop_lets_a_last_chance_job_running_alone_finish(
    client: JobClient,
    storage: MemoryStorage,
    clock: FakeClock,
    settings: RuntimeSettings,
    start_worker: StartWorker,
) -> None:
    suspect, other, thread = suspect_running_alone(storage, clock, start_worker, limit(settings, 2))
    thread.worker.request_stop()
    board.event("suspect").set()
    thread.join()
    assert stored(storage, suspect).state is JobState.SUCCEEDED
    assert stored(storage, other).state is JobState.ENQUEUED  # never claimed again
    assert board.calls[-1] == ("end", "suspect")


def test_a_second_stop_request_releases_a_last_chance_job_running_alone(
    client: JobClient,
    storage: MemoryStorage,
    clock: FakeClock,
    settings: RuntimeSettings,
    start_worker: StartWorker,
) -> None:
    patient = replace(
        limit(settings, 2),
        shutdown_timeout=timedelta(minutes=5),
        shutdown_grace=timedelta(minutes=5),
    )
    # The suspect is deaf to its cancellation.
    suspect, _, thread = suspect_running_alone(storage, clock, start_worker, patient)
    thread.worker.request_stop()
    thread.worker.request_stop()
    thread.join()
    released(storage, suspect, attempt=2)  # it ran: charged like a crash
