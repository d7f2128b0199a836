"""Reading a job from code through the public API (``jobs.get``/``jobs.aget``), and the
async enqueue calls (``fn.aenqueue``/``fn.aschedule``), on SQLite and PostgreSQL: the
test runner over the ORM provider stands in for the workers."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator
from datetime import timedelta
from typing import Any
from uuid import UUID

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.conf import settings as django_settings
from django.db import connections

from millrace_django import JobContext, JobState, JobStatus, Retry, job, jobs, tenant
from millrace_django.ids import new_id
from millrace_django.testing import JobRunner, project_runner

ALIASES = ["default", *[alias for alias in ("postgres",) if alias in django_settings.DATABASES]]
pytestmark = pytest.mark.django_db(databases=ALIASES)


@job
def add(a: int, b: int) -> dict[str, int]:
    return {"sum": a + b}


@job(retry=Retry.fixed(timedelta(seconds=10), 2))
def explode(message: str) -> None:
    raise ValueError(message)


@job(retry=Retry.fixed(timedelta(seconds=10), 2))
def flaky(context: JobContext) -> str:
    if context.attempt == 1:
        raise ConnectionError("the mail server hung up")
    return "sent"


@pytest.fixture(params=ALIASES)
def runner(request: pytest.FixtureRequest, settings: Any) -> Iterator[JobRunner]:
    """Jobs stored in ``request.param``'s database, run by the test runner."""
    settings.MILLRACE = {**settings.MILLRACE, "DATABASE": request.param}
    with project_runner(storage="orm") as installed:
        yield installed


def test_a_waiting_job_reads_as_enqueued_with_no_attempt_yet(runner: JobRunner) -> None:
    job_id = add.enqueue(2, 3)

    status = jobs.get(job_id)

    assert isinstance(status, JobStatus)
    assert status.id == job_id
    assert status.target == add.target
    assert status.queue == "default"
    assert status.state is JobState.ENQUEUED
    assert (status.attempts, status.result, status.last_error) == (0, None, None)
    assert status.created_at == runner.clock.now()
    assert status.finished_at is None and not status.finished


def test_a_succeeded_job_reads_with_its_result_and_one_attempt(runner: JobRunner) -> None:
    job_id = add.enqueue(2, 3)
    runner.run_until_idle()

    status = jobs.get(job_id)

    assert status is not None
    assert status.state is JobState.SUCCEEDED
    assert status.result == {"sum": 5}
    assert status.attempts == 1
    assert status.last_error is None
    assert status.finished and status.finished_at == runner.clock.now()


def test_a_failing_job_reads_with_its_last_error_until_it_is_dead(runner: JobRunner) -> None:
    job_id = explode.enqueue("boom")
    runner.run_until_idle()

    failed = jobs.get(job_id)
    assert failed is not None
    assert (failed.state, failed.attempts, failed.finished) == (JobState.FAILED, 1, False)
    assert failed.last_error is not None and "ValueError: boom" in failed.last_error

    runner.advance(timedelta(seconds=10))
    runner.run_until_idle(throw_on_failure=False)

    dead = jobs.get(job_id)
    assert dead is not None
    assert (dead.state, dead.attempts, dead.finished) == (JobState.DEAD, 2, True)
    assert dead.last_error is not None and "ValueError: boom" in dead.last_error
    assert dead.result is None


def test_a_job_that_succeeds_on_its_retry_keeps_the_earlier_error(runner: JobRunner) -> None:
    job_id = flaky.enqueue()
    runner.run_until_idle()
    runner.advance(timedelta(seconds=10))
    runner.run_until_idle()

    status = jobs.get(job_id)

    assert status is not None
    assert (status.state, status.attempts, status.result) == (JobState.SUCCEEDED, 2, "sent")
    assert status.last_error is not None
    assert "ConnectionError: the mail server hung up" in status.last_error


def test_an_unknown_id_reads_as_none(runner: JobRunner) -> None:
    assert jobs.get(new_id(runner.clock)) is None


def test_a_job_id_passed_as_a_string_reads_the_same_job(runner: JobRunner) -> None:
    job_id = add.enqueue(1, 1)

    assert jobs.get(str(job_id)) == jobs.get(job_id)


@pytest.mark.parametrize("bad", ["not-a-job-id", 42, None])
def test_something_that_is_not_a_job_id_is_refused_with_its_value(
    runner: JobRunner, bad: object
) -> None:
    with pytest.raises((TypeError, ValueError), match="job id"):
        jobs.get(bad)  # type: ignore[arg-type]


def test_a_status_is_a_frozen_snapshot(runner: JobRunner) -> None:
    status = jobs.get(add.enqueue(1, 2))
    assert status is not None

    with pytest.raises(dataclasses.FrozenInstanceError):
        status.state = JobState.SUCCEEDED  # type: ignore[misc]
    runner.run_until_idle()
    assert status.state is JobState.ENQUEUED


def test_an_async_enqueue_stores_the_job_in_the_ambient_tenant(runner: JobRunner) -> None:
    async def enqueue() -> UUID:
        with tenant("acme"):
            return await add.aenqueue(4, b=5)

    job_id = async_to_sync(enqueue)()
    runner.run_until_idle()

    assert runner.assert_succeeded(job_id).tenant_id == "acme"
    assert runner.get(job_id).result == {"sum": 9}


def test_an_async_enqueue_with_a_held_key_returns_the_holders_id(runner: JobRunner) -> None:
    first = add.enqueue(1, 2, idempotency_key="sum-1-2")

    async def enqueue_again() -> UUID:
        return await add.using(queue="emails").aenqueue(1, 2, idempotency_key="sum-1-2")

    assert async_to_sync(enqueue_again)() == first


@pytest.mark.django_db(transaction=True, databases=ALIASES)
def test_an_enqueue_awaited_on_a_bare_event_loop_stores_the_job(runner: JobRunner) -> None:
    """As under an ASGI server: no synchronous caller lends its thread."""

    async def enqueue() -> UUID:
        try:
            return await add.aenqueue(3, 4)
        finally:  # the thread-sensitive thread's connections, closed as a request would
            await sync_to_async(connections.close_all, thread_sensitive=True)()

    job_id = asyncio.run(enqueue())
    runner.run_until_idle()

    assert runner.assert_succeeded(job_id).result == {"sum": 7}


def test_an_async_schedule_stores_the_job_due_after_its_delay(runner: JobRunner) -> None:
    async def schedule() -> UUID:
        return await add.aschedule(1, 2, delay=timedelta(minutes=5))

    job_id = async_to_sync(schedule)()

    assert runner.get(job_id).due_at == runner.clock.now() + timedelta(minutes=5)
    assert runner.run_until_idle() == 0
    runner.advance(timedelta(minutes=5))
    assert runner.run_until_idle() == 1


def test_an_async_read_sees_what_a_sync_read_sees(runner: JobRunner) -> None:
    job_id = add.enqueue(2, 2)
    runner.run_until_idle()

    async def read() -> tuple[JobStatus | None, JobStatus | None]:
        return await jobs.aget(job_id), await jobs.aget(new_id(runner.clock))

    status, unknown = async_to_sync(read)()

    assert status == jobs.get(job_id)
    assert status is not None and status.result == {"sum": 4}
    assert unknown is None
