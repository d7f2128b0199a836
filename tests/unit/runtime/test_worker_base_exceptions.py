"""A job that raises ``KeyboardInterrupt``, ``SystemExit`` or another exception outside
``Exception`` fails its attempt like any other: the worker keeps the thread (or event
loop) it ran on, and stops by itself when idle."""

from __future__ import annotations

from dataclasses import replace

import pytest

from millrace_django.contract import JobState
from millrace_django.engine import JobClient
from millrace_django.runtime import RuntimeSettings
from millrace_django.storage.memory import MemoryStorage
from tests.unit.runtime import jobs
from tests.unit.runtime.conftest import StartWorker
from tests.unit.runtime.helpers import stored


@pytest.mark.parametrize("kind", ["KeyboardInterrupt", "SystemExit", "GeneratorExit"])
def test_a_job_raising_a_base_exception_fails_its_attempt_and_its_thread_runs_the_next(
    kind: str,
    client: JobClient,
    storage: MemoryStorage,
    settings: RuntimeSettings,
    start_worker: StartWorker,
) -> None:
    raising = jobs.interrupt.enqueue(kind)
    following = jobs.record.enqueue("after")
    worker = start_worker(config=replace(settings, concurrency=1), until_idle=True)
    worker.join()  # stopped by itself: nothing claimable, nothing in flight

    failed = stored(storage, raising)
    assert (failed.state, failed.failures) == (JobState.FAILED, 1)  # a retry waits
    assert f"{kind}: {kind} raised by the job" in (failed.last_error or "")
    assert stored(storage, following).state is JobState.SUCCEEDED  # on the same thread


@pytest.mark.parametrize("kind", ["KeyboardInterrupt", "SystemExit", "CancelledError"])
def test_an_async_job_raising_a_base_exception_fails_and_the_event_loop_runs_the_next(
    kind: str,
    client: JobClient,
    storage: MemoryStorage,
    settings: RuntimeSettings,
    start_worker: StartWorker,
) -> None:
    raising = jobs.async_interrupt.enqueue(kind)
    following = jobs.async_double.enqueue(21)
    worker = start_worker(config=replace(settings, async_concurrency=1), until_idle=True)
    worker.join()

    failed = stored(storage, raising)
    assert (failed.state, failed.failures) == (JobState.FAILED, 1)
    assert f"{kind} raised by the job" in (failed.last_error or "")
    assert stored(storage, following).result == {"value": 42, "thread": "millrace-asyncio"}
