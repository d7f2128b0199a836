"""Testing code that enqueues jobs: run them on the test's own thread, in fake time.

:class:`JobRunner` stands in for workers and the scheduler. It runs each job through
the same code the worker uses (:func:`millrace_django.runtime.run_claimed`), so a job
that succeeds, retries, dies or is declared a poison pill here does the same in
production. Time only moves when the test moves it. Works without Django::

    runner = JobRunner()
    with runner.installed():              # fn.enqueue() now stores in runner.storage
        job_id = send_confirmation.enqueue("42")
        runner.run_until_idle()
        runner.assert_succeeded(job_id)

Not modelled: leases and heartbeats, timeouts, cancellation of a running job,
shutdown, concurrency. Those belong to the worker and have its own tests.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from uuid import UUID

from millrace_django.clock import FakeClock
from millrace_django.contract import (
    ClaimRequest,
    JobQuery,
    JobRecord,
    JobState,
    JobStorage,
    MonitoringStorage,
)
from millrace_django.engine import (
    EngineConfig,
    EngineSettings,
    JobClient,
    JobContext,
    set_default_client,
)
from millrace_django.errors import MillraceError
from millrace_django.runtime import activate_due, fire_due_recurring, run_claimed
from millrace_django.runtime.execution import flush_progress
from millrace_django.storage.memory import MemoryStorage

MAX_PASSES = 10_000
"""Claim rounds before :meth:`JobRunner.run_until_idle` gives up (a job enqueueing
itself forever would otherwise hang the test)."""

CLAIM_BATCH = 16
ACTIVATION_BATCH = 100
RUNNER_ID = "millrace-test-runner"
_LEASE = timedelta(minutes=5)  # never expires: the clock only moves between runs
_PAGE = 200


class JobFailed(MillraceError):
    """A job run by the :class:`JobRunner` ended dead; ``job`` is its stored record.

    Chained (``__cause__``) to the exception the job raised, when it raised one.
    """

    def __init__(self, job: JobRecord) -> None:
        super().__init__(
            f"job {job.id} ({job.invocation.target}) is dead after {job.failures} "
            f"recorded failure(s):\n{job.last_error}"
        )
        self.job = job


class RunawayJobs(MillraceError):
    """Jobs were still claimable after :data:`MAX_PASSES` rounds."""


class JobRunner:
    """Runs claimable jobs synchronously over any storage and a :class:`FakeClock`.

    By default everything is in memory: a fresh :class:`FakeClock` (2026-01-01 UTC),
    a :class:`~millrace_django.storage.memory.MemoryStorage` and
    :class:`~millrace_django.engine.EngineSettings`. Pass your own storage together with
    the clock it was built with, and the project's settings, to test against them.
    """

    def __init__(
        self,
        storage: JobStorage | None = None,
        clock: FakeClock | None = None,
        config: EngineConfig | None = None,
    ) -> None:
        if storage is not None and clock is None:
            raise ValueError("pass the FakeClock the storage was built with as clock=")
        self.clock = clock if clock is not None else FakeClock()
        self.storage: JobStorage = storage if storage is not None else MemoryStorage(self.clock)
        self.config = config if config is not None else EngineSettings()
        self.client = JobClient(self.storage, self.clock, self.config)
        self._queues = frozenset(self.config.queues)

    @contextmanager
    def installed(self) -> Iterator[JobRunner]:
        """Make :attr:`client` the default client (behind ``fn.enqueue()``) inside the
        block, and restore the previous one after."""
        previous = set_default_client(self.client)
        try:
            yield self
        finally:
            set_default_client(previous)

    # -- moving -----------------------------------------------------------------------------

    def run_until_idle(self, *, throw_on_failure: bool = True) -> int:
        """Run jobs until none is claimable; returns how many attempts ran.

        Each round does what the scheduler would at the current time (activate due
        jobs and retries, fire due recurring definitions), then claims and runs. A
        retry due later waits for :meth:`advance`. A job that ends dead raises
        :class:`JobFailed` unless ``throw_on_failure`` is false.
        """
        attempts = 0
        for _ in range(MAX_PASSES):
            self._schedule()
            claimed = self.storage.claim(
                ClaimRequest(
                    worker_id=RUNNER_ID,
                    queues=self._queues,
                    max_count=CLAIM_BATCH,
                    lease=_LEASE,
                )
            )
            if not claimed:
                return attempts
            for job in claimed:
                attempts += 1
                self._run(job, throw_on_failure=throw_on_failure)
        raise RunawayJobs(
            f"jobs were still claimable after {MAX_PASSES} rounds; is a job enqueueing "
            "itself in a loop?"
        )

    def advance(self, delta: timedelta) -> datetime:
        """Move the clock forward and do what the scheduler would then (activate due
        jobs, fire due recurring definitions) without running anything; returns the
        new time."""
        now = self.clock.advance(delta)
        self._schedule()
        return now

    # -- looking ----------------------------------------------------------------------------

    def get(self, job_id: UUID) -> JobRecord:
        """The stored job (an ``AssertionError`` if there is none)."""
        job = self.storage.get_job(job_id)
        if job is None:
            raise AssertionError(f"no job {job_id} is stored")
        return job

    def jobs(self, *states: JobState) -> list[JobRecord]:
        """Every stored job (oldest first), or those in ``states``. Needs a storage
        with the monitoring read model (the memory and ORM providers have it)."""
        if not isinstance(self.storage, MonitoringStorage):
            raise TypeError(f"{type(self.storage).__name__} cannot list jobs")
        found: list[JobRecord] = []
        cursor: str | None = None
        while True:
            page = self.storage.query_jobs(
                JobQuery(states=frozenset(states), cursor=cursor, limit=_PAGE)
            )
            found.extend(self.get(summary.id) for summary in page.items)
            cursor = page.next_cursor
            if cursor is None or not page.items:
                return found[::-1]

    def assert_state(self, job_id: UUID, state: JobState) -> JobRecord:
        """Fail unless the job is in ``state``; returns it for further checks."""
        job = self.get(job_id)
        if job.state is not state:
            raise AssertionError(
                f"job {job_id} ({job.invocation.target}) is {job.state.value}, "
                f"not {state.value}"
                + (f"; last error:\n{job.last_error}" if job.last_error else "")
            )
        return job

    def assert_succeeded(self, job_id: UUID) -> JobRecord:
        return self.assert_state(job_id, JobState.SUCCEEDED)

    # -- inside -----------------------------------------------------------------------------

    def _schedule(self) -> None:
        now = self.clock.now()
        activate_due(self.storage, now, ACTIVATION_BATCH)
        fire_due_recurring(self.storage, self.clock, now, ACTIVATION_BATCH)

    def _run(self, job: JobRecord, *, throw_on_failure: bool) -> None:
        context = JobContext.for_job(job, self.clock)
        outcome = run_claimed(job, context, clock=self.clock, config=self.config)
        flush_progress(self.storage, job, context)
        transition = outcome.transition
        if transition is None or not self.storage.apply(transition):
            return
        if transition.target is JobState.DEAD and throw_on_failure:
            raise JobFailed(self.get(job.id)) from outcome.error
