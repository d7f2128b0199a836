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

Under Django, :meth:`JobRunner.for_project` builds a runner from ``settings.MILLRACE``,
:func:`project_runner` installs one for a block (following setting overrides), and
:class:`JobRunnerMixin` does it for each test of a ``TestCase``; the pytest plugin
``millrace_django.pytest_plugin`` offers the ``millrace`` fixture. The runner's clock
follows freezegun while a freezegun time is active (:class:`FreezegunClock`), so a job
reading ``timezone.now()`` and the engine agree on "now".
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any, Literal
from uuid import UUID

from millrace_django.clock import FakeClock
from millrace_django.contract import (
    ClaimRequest,
    InstanceState,
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
from millrace_django.engine.workflow import WorkflowClient, WorkflowInstance
from millrace_django.errors import ConcurrencyConflict, MillraceError, StorageError
from millrace_django.runtime import activate_due, expire_due, fire_due_recurring, run_claimed
from millrace_django.runtime.execution import flush_progress, remerge
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


class FreezegunClock(FakeClock):
    """A :class:`FakeClock` that follows freezegun while a frozen time is active.

    With freezegun active, :meth:`now` is freezegun's frozen time and :meth:`advance` /
    :meth:`set` move freezegun's time, so code reading ``timezone.now()`` and the engine
    see the same instant whichever of them moved it. Without freezegun (or once it
    stopped) it is an ordinary :class:`FakeClock`.
    """

    def now(self) -> datetime:
        frozen = _freezegun_now()
        return frozen if frozen is not None else super().now()

    def advance(self, delta: timedelta) -> datetime:
        factory = _freezegun_factory()
        if factory is None:
            return super().advance(delta)
        if delta < timedelta(0):
            raise ValueError("a FakeClock only moves forward; got a negative delta")
        factory.tick(delta)
        return self.now()

    def set(self, instant: datetime) -> None:
        factory = _freezegun_factory()
        if factory is None:
            super().set(instant)
            return
        if instant.tzinfo is None or instant.utcoffset() is None:
            raise ValueError("clock instants must be timezone-aware")
        if instant < self.now():
            raise ValueError("a FakeClock only moves forward")
        factory.move_to(instant.astimezone(UTC).replace(tzinfo=None))


def _freezegun_factory() -> Any:
    """freezegun's innermost active time factory, if freezegun is imported and active."""
    api = sys.modules.get("freezegun.api")
    factories = getattr(api, "freeze_factories", None)
    return factories[-1] if factories else None


def _freezegun_now() -> datetime | None:
    factory = _freezegun_factory()
    if factory is None:
        return None
    frozen: datetime = factory()  # naive, in UTC
    return frozen.replace(tzinfo=UTC) if frozen.tzinfo is None else frozen.astimezone(UTC)


class JobRunner:
    """Runs claimable jobs synchronously over any storage and a :class:`FakeClock`.

    By default everything is in memory: a fresh :class:`FreezegunClock` (2026-01-01 UTC,
    or freezegun's time while one is active),
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
        self.clock = clock if clock is not None else FreezegunClock()
        self.storage: JobStorage = storage if storage is not None else MemoryStorage(self.clock)
        self.config = config if config is not None else EngineSettings()
        self.client = JobClient(self.storage, self.clock, self.config)
        self._queues = frozenset(self.config.queues)

    @classmethod
    def for_project(
        cls, *, storage: Literal["memory", "orm"] = "memory", clock: FakeClock | None = None
    ) -> JobRunner:
        """A runner with the project's ``settings.MILLRACE`` (its queues, default retry,
        interruption limit), over a fresh memory storage, or with ``storage="orm"`` over
        the ORM provider on ``MILLRACE['DATABASE']`` (the test database: the test needs
        database access, e.g. ``@pytest.mark.django_db`` or a ``TestCase``)."""
        from millrace_django.conf import get_settings

        clock = clock if clock is not None else FreezegunClock()
        config = get_settings()
        if storage == "memory":
            return cls(MemoryStorage(clock), clock, config)
        if storage == "orm":
            from millrace_django.storage.orm import DjangoStorage

            return cls(DjangoStorage(config.database, clock), clock, config)
        raise ValueError(f"storage must be 'memory' or 'orm'; got {storage!r}")

    def reconfigure(self, config: EngineConfig) -> None:
        """Use new settings (queues, default retry, ...) from now on; :attr:`client` is
        replaced by one with ``config`` on the same storage and clock."""
        self.config = config
        self.client = JobClient(self.storage, self.clock, config)
        self._queues = frozenset(config.queues)

    @property
    def workflows(self) -> WorkflowClient:
        """Start, signal, cancel, recover and read workflow instances in this runner's
        storage (which must also store workflows, as the memory and ORM providers do)."""
        return WorkflowClient(self.storage, self.clock, self.config)

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

        Each round does what the scheduler would at the current time (fire due
        recurring definitions, end jobs past their deadline, activate due jobs and
        retries), then claims and runs. A retry due later waits for :meth:`advance`. A
        job that ends dead raises :class:`JobFailed` unless ``throw_on_failure`` is
        false.
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
        """Move the clock forward and do what the scheduler would then (fire due
        recurring definitions, end jobs past their deadline, activate due jobs)
        without running anything; returns the new time."""
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

    def assert_instance(self, instance_id: UUID, state: InstanceState) -> WorkflowInstance:
        """Fail unless the workflow instance is in ``state``; returns it."""
        instance = self.workflows.get(instance_id)
        if instance is None:
            raise AssertionError(f"no workflow instance {instance_id} is stored")
        if instance.state is not state:
            raise AssertionError(
                f"workflow instance {instance_id} ({instance.definition_id} "
                f"v{instance.version}) is {instance.state.value}, not {state.value}"
                + (
                    f"; error at {instance.failed_node}:\n{instance.error}"
                    if instance.error
                    else ""
                )
            )
        return instance

    # -- inside -----------------------------------------------------------------------------

    def _schedule(self) -> None:
        now = self.clock.now()
        fire_due_recurring(
            self.storage, self.clock, now, ACTIVATION_BATCH, self.config.queue_limits
        )
        expire_due(self.storage, now, ACTIVATION_BATCH)
        activate_due(self.storage, now, ACTIVATION_BATCH)

    def _run(self, job: JobRecord, *, throw_on_failure: bool) -> None:
        context = JobContext.for_job(job, self.clock, storage=self.storage)
        # In this process even with a hard timeout (not enforced here): the test's mocks
        # and memory storage would not reach a child process.
        in_process = job if job.hard_timeout is None else replace(job, hard_timeout=None)
        outcome = run_claimed(in_process, context, clock=self.clock, config=self.config)
        flush_progress(self.storage, job, context)
        transition = outcome.transition
        if transition is None:
            return
        result: bool | StorageError
        if outcome.written is not None:  # an atomic job's own transaction applied it
            result = outcome.written
        else:
            try:
                result = self.storage.apply(transition)
            except ConcurrencyConflict as conflict:  # re-merged as the worker does
                transition, result = remerge(self.storage, job, context, transition, conflict)
        if isinstance(result, StorageError):
            raise result
        if isinstance(outcome.error, KeyboardInterrupt):
            # Recorded as the job's failure, as a worker would; but this is the test's
            # own thread, where Ctrl-C lands: let whoever pressed it stop the run.
            raise outcome.error
        if not result:
            return
        if transition.target is JobState.DEAD and throw_on_failure:
            raise JobFailed(self.get(job.id)) from outcome.error


# -- Django ---------------------------------------------------------------------------------


@contextmanager
def project_runner(
    *, storage: Literal["memory", "orm"] = "memory", clock: FakeClock | None = None
) -> Iterator[JobRunner]:
    """A :meth:`JobRunner.for_project` runner installed as the default client inside the
    block; the previous client is restored after.

    While installed it follows ``MILLRACE`` overrides (``override_settings``,
    pytest-django's ``settings`` fixture): the runner takes the new settings and stays the
    default client, instead of the app's own client taking over again.
    """
    from django.core.signals import setting_changed

    from millrace_django.conf import InvalidSettings, get_settings

    runner = JobRunner.for_project(storage=storage, clock=clock)

    def follow(*, setting: str, **kwargs: object) -> None:
        if setting not in ("MILLRACE", "DATABASES"):
            return
        with suppress(InvalidSettings, ValueError):  # invalid: keep the last good ones
            runner.reconfigure(get_settings())
        set_default_client(runner.client)

    # Connected after the app's own receiver, so it runs after it and has the last word.
    setting_changed.connect(follow, weak=False, dispatch_uid=("millrace-runner", id(runner)))
    try:
        with runner.installed():
            yield runner
    finally:
        setting_changed.disconnect(dispatch_uid=("millrace-runner", id(runner)))


class JobRunnerMixin:
    """For Django ``TestCase`` classes: ``self.millrace`` is a :class:`JobRunner`
    installed as the default client for each test (a fresh one per test, memory storage
    unless ``millrace_storage = "orm"``), and the previous client is restored after::

        class CheckoutTests(JobRunnerMixin, TestCase):
            def test_confirmation_is_sent(self):
                job_id = send_confirmation.enqueue("42")
                self.millrace.run_until_idle()
                self.millrace.assert_succeeded(job_id)
    """

    millrace_storage: Literal["memory", "orm"] = "memory"
    millrace: JobRunner

    def setUp(self) -> None:
        super().setUp()  # type: ignore[misc]
        installed = project_runner(storage=self.millrace_storage)
        self.millrace = installed.__enter__()
        self.addCleanup(installed.__exit__, None, None, None)  # type: ignore[attr-defined]
