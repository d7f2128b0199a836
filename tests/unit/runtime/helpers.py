"""Bounded waiting and worker threads for the runtime tests (no sleeping for time)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import timedelta
from uuid import UUID

from millrace_django.clock import FakeClock
from millrace_django.contract import ClaimRequest, JobRecord, JobState
from millrace_django.runtime import Worker
from millrace_django.storage.memory import MemoryStorage
from tests.unit.runtime.jobs import board

TIMEOUT = 5.0
"""The longest any test waits for something to happen (real seconds)."""


def wait_until(predicate: Callable[[], object], what: str, timeout: float = TIMEOUT) -> None:
    """Poll ``predicate`` until it holds; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.002)


def started(name: str) -> None:
    """Wait until the job coordinating on ``name`` runs."""
    if not board.event(f"{name}:started").wait(TIMEOUT):
        raise AssertionError(f"job {name!r} did not start")


def stored(storage: MemoryStorage, job_id: UUID) -> JobRecord:
    job = storage.get_job(job_id)
    assert job is not None
    return job


def wait_for_state(storage: MemoryStorage, job_id: UUID, state: JobState) -> JobRecord:
    wait_until(lambda: stored(storage, job_id).state is state, f"job {job_id} to be {state}")
    return stored(storage, job_id)


def steal(storage: MemoryStorage, clock: FakeClock, lease: timedelta) -> list[JobRecord]:
    """Let a lease lapse and claim as another worker (a crash, as seen from outside)."""
    clock.advance(lease + timedelta(seconds=1))
    return storage.claim(
        ClaimRequest(
            worker_id="thief",
            queues=frozenset({"default", "emails"}),
            max_count=100,
            lease=lease,
        )
    )


class WorkerThread:
    """``worker.run()`` on a thread, stopped for good when the test ends."""

    def __init__(self, worker: Worker, *, until_idle: bool = False) -> None:
        self.worker = worker
        self._thread = threading.Thread(
            target=worker.run, kwargs={"until_idle": until_idle}, daemon=True
        )

    def start(self) -> WorkerThread:
        self._thread.start()
        return self

    def join(self, timeout: float = TIMEOUT) -> None:
        """Wait for ``run()`` to return; fail if it does not in time."""
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise AssertionError("the worker did not stop in time")

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def close(self) -> None:
        if self._thread.is_alive():
            self.worker.request_stop()
            self.worker.request_stop()
            board.open_all()
            self.join()
