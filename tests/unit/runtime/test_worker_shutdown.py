"""Two-phase shutdown: drain what finishes in time, release the rest, fenced and free."""

from __future__ import annotations

import os
import signal
import threading
from dataclasses import replace
from datetime import timedelta

from millrace_django.contract import AttemptOutcome, JobState
from millrace_django.engine import JobClient
from millrace_django.runtime import RuntimeSettings, handle_stop_signals
from millrace_django.storage.memory import MemoryStorage
from tests.unit.runtime import jobs
from tests.unit.runtime.conftest import StartWorker
from tests.unit.runtime.helpers import started, stored, wait_until
from tests.unit.runtime.jobs import board


def test_shutdown_stops_claiming_and_drains_jobs_that_finish_in_time(
    client: JobClient, storage: MemoryStorage, start_worker: StartWorker
) -> None:
    short = [jobs.hold.enqueue(name) for name in ("a", "b")]
    thread = start_worker(concurrency=2)
    started("a")
    started("b")
    thread.worker.request_stop()
    late = jobs.record.enqueue("late")
    assert thread.worker.stats.stopping
    board.event("a").set()
    board.event("b").set()
    thread.join()
    assert [stored(storage, job_id).state for job_id in short] == [JobState.SUCCEEDED] * 2
    assert stored(storage, late).state is JobState.ENQUEUED


def test_shutdown_releases_jobs_still_running_after_the_timeout(
    client: JobClient,
    storage: MemoryStorage,
    settings: RuntimeSettings,
    start_worker: StartWorker,
) -> None:
    long = [jobs.cooperate.enqueue(name) for name in ("x", "y")]
    quick = replace(settings, shutdown_timeout=timedelta(milliseconds=20))
    thread = start_worker(config=quick)
    started("x")
    started("y")
    thread.worker.request_stop()
    thread.join()
    for job_id in long:
        job = stored(storage, job_id)
        assert (job.state, job.attempt, job.failures, job.worker_id) == (
            JobState.ENQUEUED,
            1,
            0,
            None,
        )
        details = storage.get_job_details(job_id)
        assert details is not None
        assert [a.outcome for a in details.attempts] == [AttemptOutcome.INTERRUPTED]
    assert thread.worker.stats.acknowledged == {JobState.ENQUEUED: 2}


def test_a_second_stop_request_releases_at_once(
    client: JobClient,
    storage: MemoryStorage,
    settings: RuntimeSettings,
    start_worker: StartWorker,
) -> None:
    job_id = jobs.hold.enqueue("deaf")
    patient = replace(
        settings, shutdown_timeout=timedelta(minutes=5), shutdown_grace=timedelta(minutes=5)
    )
    thread = start_worker(config=patient)
    started("deaf")
    thread.worker.request_stop()
    thread.worker.request_stop()
    thread.join()
    job = stored(storage, job_id)
    assert (job.state, job.failures) == (JobState.ENQUEUED, 0)
    assert thread.worker.stats.abandoned == 1


def test_sigterm_asks_the_worker_to_stop(
    client: JobClient, storage: MemoryStorage, start_worker: StartWorker
) -> None:
    thread = start_worker()
    wait_until(lambda: thread.worker.stats.empty_claims > 0, "the worker to poll")
    before = signal.getsignal(signal.SIGTERM)
    restore = handle_stop_signals(thread.worker.request_stop)
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        thread.join()
    finally:
        restore()
    assert signal.getsignal(signal.SIGTERM) is before


def test_a_stop_signal_never_waits_for_a_lock_the_main_thread_holds() -> None:
    """The handler runs on the main thread between two bytecodes, maybe inside a lock
    the stop needs: it must hand the stop to another thread, not take the lock itself."""
    needed = threading.Lock()
    outcome: list[str] = []

    def request_stop() -> None:
        got = needed.acquire(timeout=1)
        outcome.append(threading.current_thread().name if got else "lock never came")
        if got:
            needed.release()

    restore = handle_stop_signals(request_stop)
    try:
        with needed:
            os.kill(os.getpid(), signal.SIGTERM)  # the handler runs now, on this thread
        wait_until(lambda: outcome, "the stop request")
    finally:
        restore()
    assert outcome == ["millrace-stop-signals"]
