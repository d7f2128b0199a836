"""A job that raises ``KeyboardInterrupt``, ``SystemExit`` or another exception outside
``Exception`` fails its attempt like any other: the worker keeps the thread (or event
loop) it ran on, and stops by itself when idle."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from millrace_django.contract import JobState
from millrace_django.engine import JobClient, JobDefinition
from millrace_django.runtime import RuntimeSettings
from millrace_django.storage.memory import MemoryStorage
from tests.unit.runtime import jobs
from tests.unit.runtime.conftest import StartWorker
from tests.unit.runtime.helpers import stored

ON_A_THREAD = (jobs.interrupt, (jobs.record, "after"), "after")
"""The raising job, the job queued after it and what that one returns, with one thread."""
ON_THE_LOOP = (
    jobs.async_interrupt,
    (jobs.async_double, 21),
    {"value": 42, "thread": "millrace-asyncio"},
)
"""The same with one slot on the event loop."""


@pytest.mark.parametrize(
    ("kind", "case"),
    [
        ("KeyboardInterrupt", ON_A_THREAD),
        ("SystemExit", ON_A_THREAD),
        ("GeneratorExit", ON_A_THREAD),
        ("KeyboardInterrupt", ON_THE_LOOP),
        ("SystemExit", ON_THE_LOOP),
        ("CancelledError", ON_THE_LOOP),
    ],
    ids=lambda value: (
        value if isinstance(value, str) else "thread" if value is ON_A_THREAD else "loop"
    ),
)
def test_a_job_raising_a_base_exception_fails_and_the_worker_runs_the_next_and_stops(
    kind: str,
    case: tuple[JobDefinition[..., Any], tuple[JobDefinition[..., Any], Any], Any],
    client: JobClient,
    storage: MemoryStorage,
    settings: RuntimeSettings,
    start_worker: StartWorker,
) -> None:
    raising_job, (next_job, argument), next_result = case
    raising = raising_job.enqueue(kind)
    following = next_job.enqueue(argument)
    config = replace(settings, concurrency=1, async_concurrency=1)
    start_worker(config=config, until_idle=True).join()  # stopped by itself when idle

    failed = stored(storage, raising)
    assert (failed.state, failed.failures) == (JobState.FAILED, 1)  # its retry waits
    assert f"{kind}: {kind} raised by the job" in (failed.last_error or "")
    assert stored(storage, following).result == next_result  # on the same thread or loop
