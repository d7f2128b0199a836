"""Atomic jobs on real databases: the job's writes commit with its fenced success, or
not at all.

Each test claims a job of :func:`~tests.integration.atomic_jobs.bump` (one ``UPDATE``
of a counter row on the storage's database) and runs it the way a worker does
(:func:`~millrace_django.runtime.run_claimed`), on SQLite (the default alias) and on
the PostgreSQL and MariaDB test servers when configured. A worker fenced off while the
job ran is simulated by a second worker claiming the job after its lease ended, before
the job starts or, on the servers, while it runs (SQLite's single writer lets no one
claim while the job's transaction is open).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

import pytest
from django.conf import settings
from django.db import connections
from django.test.utils import CaptureQueriesContext

from millrace_django.clock import FakeClock, SystemClock
from millrace_django.contract import ClaimRequest, JobRecord, JobState
from millrace_django.engine import EngineSettings, JobClient, JobContext, Retry
from millrace_django.engine.registry import JobLike
from millrace_django.management.support import connection_hooks
from millrace_django.models import JOB_STATES, Job
from millrace_django.runtime import RuntimeSettings, Worker, run_claimed
from millrace_django.runtime.execution import Outcome
from millrace_django.storage.orm import DjangoStorage
from millrace_django.testing import JobRunner
from tests.integration import atomic_jobs
from tests.reliability.harness.processes import wait_until

ALIASES = [alias for alias in ("default", "postgres", "mariadb") if alias in settings.DATABASES]
SERVERS = [alias for alias in ALIASES if alias != "default"]
pytestmark = pytest.mark.django_db(transaction=True, databases=ALIASES)

LEASE = timedelta(seconds=30)
TICK = timedelta(milliseconds=50)
COUNTER = "atomic"


def _counted(alias: str) -> Iterator[str]:
    """``alias`` with a counter row at 0, and no jobs left after."""
    with atomic_jobs.counter_table(alias, COUNTER):
        yield alias
    Job.objects.using(alias).all().delete()


@pytest.fixture(params=ALIASES)
def alias(request: pytest.FixtureRequest) -> Iterator[str]:
    yield from _counted(request.param)


@pytest.fixture(params=SERVERS)
def server(request: pytest.FixtureRequest) -> Iterator[str]:
    """The server databases only (another connection can claim while a job runs)."""
    yield from _counted(request.param)


@pytest.fixture(params=[alias for alias in SERVERS if alias == "postgres"])
def postgres(request: pytest.FixtureRequest) -> Iterator[str]:
    yield from _counted(request.param)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def client_on(alias: str, clock: FakeClock) -> JobClient:
    config = EngineSettings(queues=frozenset({"default"}), default_retry=Retry.none())
    return JobClient(DjangoStorage(alias, clock), clock, config)


def claim(client: JobClient, worker: str) -> JobRecord:
    request = ClaimRequest(
        worker_id=worker, queues=frozenset({"default"}), max_count=1, lease=LEASE
    )
    (claimed,) = client.storage.claim(request)
    return claimed


def claimed_job(
    alias: str, clock: FakeClock, fn: JobLike, *args: Any, **kwargs: Any
) -> tuple[JobClient, JobRecord]:
    """A client on ``alias`` and worker ``a``'s claim of one new job of ``fn``."""
    client = client_on(alias, clock)
    client.enqueue(fn, *args, **kwargs)
    return client, claim(client, "a")


def run(client: JobClient, claimed: JobRecord) -> Outcome:
    context = JobContext.for_job(claimed, client.clock, storage=client.storage)
    return run_claimed(claimed, context, clock=client.clock, config=client.config)


def stored(client: JobClient, claimed: JobRecord) -> JobRecord:
    record = client.storage.get_job(claimed.id)
    assert record is not None
    return record


def test_an_atomic_jobs_write_commits_with_its_success(alias: str, clock: FakeClock) -> None:
    client, claimed = claimed_job(alias, clock, atomic_jobs.bump, alias, COUNTER)

    outcome = run(client, claimed)

    assert outcome.written is True  # applied in the job's transaction, not by the caller
    assert outcome.transition is not None and outcome.transition.target is JobState.SUCCEEDED
    assert atomic_jobs.count(alias, COUNTER) == 1
    assert stored(client, claimed).state is JobState.SUCCEEDED


def test_an_atomic_job_fenced_off_before_it_ran_leaves_no_write_behind(
    alias: str, clock: FakeClock
) -> None:
    client, first = claimed_job(alias, clock, atomic_jobs.bump, alias, COUNTER)
    clock.advance(LEASE + timedelta(seconds=1))  # worker a stalled past its lease...
    second = claim(client, "b")  # ...and b took the job over

    stale = run(client, first)

    assert stale.written is False
    assert atomic_jobs.count(alias, COUNTER) == 0
    assert stored(client, first).worker_id == "b"
    assert run(client, second).written is True
    assert atomic_jobs.count(alias, COUNTER) == 1
    assert stored(client, second).state is JobState.SUCCEEDED


def test_an_atomic_job_fenced_off_while_it_runs_leaves_no_write_behind(
    server: str, clock: FakeClock
) -> None:
    client, first = claimed_job(server, clock, atomic_jobs.bump, server, COUNTER)
    taken: list[JobRecord] = []

    def steal() -> None:  # another worker, on its own connection, after the lease
        try:
            taken.append(claim(client, "b"))
        finally:
            connections[server].close()

    def interfere() -> None:
        clock.advance(LEASE + timedelta(seconds=1))
        thief = threading.Thread(target=steal)
        thief.start()
        thief.join(10)

    atomic_jobs.during_job = interfere
    try:
        stale = run(client, first)  # wrote, then lost its claim before returning
    finally:
        atomic_jobs.during_job = None

    assert [job.worker_id for job in taken] == ["b"]  # the job row was not locked
    assert stale.written is False
    assert atomic_jobs.count(server, COUNTER) == 0
    assert run(client, taken[0]).written is True
    assert atomic_jobs.count(server, COUNTER) == 1


def test_a_failing_atomic_job_rolls_its_write_back_and_fails_the_usual_way(
    alias: str, clock: FakeClock
) -> None:
    client, claimed = claimed_job(alias, clock, atomic_jobs.bump, alias, COUNTER, fail=True)

    outcome = run(client, claimed)

    assert outcome.written is None  # the caller writes the failure, as for any job
    assert outcome.transition is not None and outcome.transition.target is JobState.DEAD
    assert isinstance(outcome.error, RuntimeError)
    assert atomic_jobs.count(alias, COUNTER) == 0
    assert client.storage.apply(outcome.transition)
    assert stored(client, claimed).state is JobState.DEAD


def test_the_test_runner_runs_atomic_jobs_atomically_on_the_orm_storage(
    alias: str, clock: FakeClock
) -> None:
    config = EngineSettings(queues=frozenset({"default"}), default_retry=Retry.none())
    runner = JobRunner(DjangoStorage(alias, clock), clock, config)
    with runner.installed():
        kept = atomic_jobs.bump.enqueue(alias, COUNTER)
        undone = atomic_jobs.bump.enqueue(alias, COUNTER, fail=True)
        runner.run_until_idle(throw_on_failure=False)

    runner.assert_succeeded(kept)
    runner.assert_state(undone, JobState.DEAD)
    assert atomic_jobs.count(alias, COUNTER) == 1


def test_a_long_atomic_job_keeps_its_lease_renewed_while_its_transaction_is_open(
    server: str,
) -> None:
    # The job's transaction must not lock the job row before its very end: a heartbeat
    # renewing the lease meanwhile would wait behind it, and the lease would lapse.
    clock = SystemClock()
    config = RuntimeSettings(
        queues=frozenset({"default"}),
        default_retry=Retry.none(),
        lease=timedelta(seconds=2),
        heartbeat=timedelta(milliseconds=250),
        poll_max=timedelta(milliseconds=200),
        clock_sync=False,
    )
    storage = DjangoStorage(server, clock)
    client = JobClient(storage, clock, config)
    # The job outlasts two leases.
    job_id = client.enqueue(atomic_jobs.bump_slowly, server, COUNTER, 5.0)
    owner, rival = (
        Worker(storage, clock, config, worker_id=name, hooks=connection_hooks(), tick=TICK)
        for name in ("owner", "rival")
    )
    threads = [threading.Thread(target=_run, args=(owner, server), daemon=True)]
    threads[0].start()
    wait_until(lambda: _state(server, job_id) is JobState.PROCESSING, 10, "the claim")
    threads.append(threading.Thread(target=_run, args=(rival, server), daemon=True))
    threads[1].start()  # would take the job over if its lease lapsed
    first = _lease_until(server, job_id)
    wait_until(lambda: _lease_until(server, job_id) > first, 3, "a renewal mid-run")
    wait_until(lambda: _state(server, job_id) is JobState.SUCCEEDED, 10, "the success")
    for worker in (owner, rival):
        worker.request_stop()
    for thread in threads:
        thread.join(10)

    record = client.storage.get_job(job_id)
    assert record is not None and record.attempt == 1  # never taken over
    assert owner.stats.fence_lost == 0 and rival.stats.claimed == 0
    assert owner.stats.acknowledged == {JobState.SUCCEEDED: 1}  # written by the job
    assert owner.stats.in_flight == 0
    assert atomic_jobs.count(server, COUNTER) == 1


def _run(worker: Worker, alias: str) -> None:
    """``worker.run()``, closing the claim loop's connection after."""
    try:
        worker.run()
    finally:
        connections[alias].close()


def _state(alias: str, job_id: UUID) -> JobState:
    return JOB_STATES[Job.objects.using(alias).get(uuid=job_id).state]


def _lease_until(alias: str, job_id: UUID) -> datetime:
    lease_until = Job.objects.using(alias).get(uuid=job_id).lease_until
    assert lease_until is not None
    return lease_until


def test_an_atomic_job_whose_success_cannot_be_written_fails_with_its_writes_undone(
    postgres: str, clock: FakeClock
) -> None:
    client, claimed = claimed_job(postgres, clock, atomic_jobs.bump_then_break, postgres, COUNTER)

    outcome = run(client, claimed)

    assert outcome.written is None  # the failure is written the usual way
    assert outcome.transition is not None and outcome.transition.target is JobState.DEAD
    assert outcome.error is not None and "aborted" in str(outcome.error)
    assert atomic_jobs.count(postgres, COUNTER) == 0
    assert client.storage.apply(outcome.transition)


def test_an_atomic_job_cannot_checkpoint_and_fails_with_its_write_undone(
    alias: str, clock: FakeClock
) -> None:
    """Its writes roll back with a failure, so its retry starts afresh anyway; and the
    checkpoint's write would lock the job's row in its transaction until it ends, so
    that its worker's heartbeat could not renew its leases meanwhile."""
    client, claimed = claimed_job(alias, clock, atomic_jobs.bump_and_checkpoint, alias, COUNTER)

    outcome = run(client, claimed)

    assert isinstance(outcome.error, RuntimeError)
    assert "an atomic job cannot save a checkpoint" in str(outcome.error)
    assert atomic_jobs.count(alias, COUNTER) == 0
    assert outcome.transition is not None and client.storage.apply(outcome.transition)
    assert stored(client, claimed).checkpoint is None


def test_an_atomic_jobs_success_is_one_statement_inside_its_transaction_on_postgresql(
    postgres: str, clock: FakeClock
) -> None:
    # The acknowledger's one-statement completion, not the portable path's (a locking
    # read, the update, then the maintained counts' rows: six statements).
    client, claimed = claimed_job(postgres, clock, atomic_jobs.nothing)

    with CaptureQueriesContext(connections[postgres]) as captured:
        assert run(client, claimed).written is True

    control = ("BEGIN", "SAVEPOINT", "RELEASE SAVEPOINT", "COMMIT")
    statements = [q["sql"] for q in captured.captured_queries if not q["sql"].startswith(control)]
    assert len(statements) == 1, statements
