"""A failed job keeps the traceback Python prints, starting at the job's own call: the
worker's and the executor's frames, which say nothing about the failure, are left out,
whether a worker or the test runner ran it, sync or async."""

from __future__ import annotations

import re
from collections.abc import Callable
from uuid import UUID

import pytest

from millrace_django.contract import JobState
from millrace_django.engine import JobClient
from millrace_django.storage.memory import MemoryStorage
from millrace_django.testing import JobRunner
from tests.unit.runtime import jobs
from tests.unit.runtime.conftest import StartWorker
from tests.unit.runtime.helpers import wait_for_state

type Run = Callable[[UUID], str]
"""Runs a job until it is dead; returns its stored error."""


@pytest.fixture(params=["worker", "runner"])
def run(
    request: pytest.FixtureRequest,
    client: JobClient,
    storage: MemoryStorage,
    start_worker: StartWorker,
) -> Run:
    def by_worker(job_id: UUID) -> str:
        start_worker(until_idle=True)
        return wait_for_state(storage, job_id, JobState.DEAD).last_error or ""

    def by_runner(job_id: UUID) -> str:
        runner = JobRunner(storage=storage, clock=client.clock, config=client.config)
        runner.run_until_idle(throw_on_failure=False)
        return runner.get(job_id).last_error or ""

    return by_worker if request.param == "worker" else by_runner


def frames(text: str) -> list[str]:
    """The functions of a traceback's frames, outermost first."""
    return re.findall(r'^  File "[^"]+", line \d+, in (\S+)$', text, re.M)


@pytest.mark.parametrize("job", [jobs.explode, jobs.async_explode])
def test_the_stored_traceback_starts_at_the_jobs_function(run: Run, job) -> None:
    error = run(job.enqueue("boom"))
    assert error.startswith("Traceback (most recent call last):\n")
    assert frames(error)[0] == job.__name__
    assert "millrace_django" not in error
    assert error.endswith("\nRuntimeError: boom\n")


def test_a_chained_exception_keeps_both_tracebacks(run: Run) -> None:
    error = run(jobs.explode_while_handling.enqueue("boom"))
    assert frames(error) == ["explode_while_handling"] * 2
    assert "KeyError: 'missing'\n\nThe above exception was the direct cause" in error
    assert error.endswith("\nRuntimeError: boom\n")
