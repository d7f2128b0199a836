"""Running a stored job's function: sync, async, with context, in its tenant."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from dataclasses import replace
from uuid import uuid4

import pytest

from millrace_django.clock import FakeClock
from millrace_django.contract import Invocation, JobRecord, JobState
from millrace_django.engine import (
    InvalidStoredArguments,
    JobClient,
    JobContext,
    UnresolvableTarget,
    capture,
    current_tenant,
    prepare,
    run_handler,
    tenant,
)
from millrace_django.storage.memory import MemoryStorage
from tests.unit.engine import sample_jobs
from tests.unit.engine.helpers import claim


def stored_job(
    job: object, *args: object, tenant_id: str | None = None, **kwargs: object
) -> JobRecord:
    return JobRecord(
        id=uuid4(),
        queue="default",
        invocation=capture(job, args, kwargs),  # type: ignore[arg-type]
        state=JobState.PROCESSING,
        created_at=FakeClock().now(),
        attempt=1,
        worker_id="w",
        tenant_id=tenant_id,
    )


def run(job: JobRecord, clock: FakeClock, **options: object) -> object:
    return run_handler(prepare(job), JobContext.for_job(job, clock), **options)  # type: ignore[arg-type]


def test_a_sync_job_runs_with_its_stored_arguments(clock: FakeClock) -> None:
    assert run(stored_job(sample_jobs.send_invoice, "42", copies=3), clock) == "invoice 42 x3"
    assert run(stored_job(sample_jobs.spread, 1, 2, flag=True), clock) == {
        "first": 1,
        "rest": [2],
        "options": {"flag": True},
    }


def test_an_async_job_runs_on_a_fresh_event_loop(clock: FakeClock) -> None:
    assert run(stored_job(sample_jobs.async_add, 2, 3), clock) == 5


def test_a_job_that_declares_context_receives_it(clock: FakeClock) -> None:
    job = stored_job(sample_jobs.with_context, "report", tenant_id="acme")
    context = JobContext.for_job(job, clock)
    result = run_handler(prepare(job), context)
    assert result == {"job_id": str(job.id), "attempt": 1, "tenant": "acme"}
    assert [line.message for line in context.logs] == ["working on report"]
    assert context.progress == 0.5


def test_the_jobs_tenant_is_ambient_during_the_call_and_restored_after(clock: FakeClock) -> None:
    with tenant("caller"):
        assert run(stored_job(sample_jobs.whose_tenant, tenant_id="acme"), clock) == "acme"
        assert run(stored_job(sample_jobs.whose_tenant), clock) is None
        assert current_tenant() == "caller"


def test_an_async_job_sees_its_tenant_too(clock: FakeClock) -> None:
    assert run(stored_job(sample_jobs.async_tenant, tenant_id="acme"), clock) == ["acme", "acme"]


def test_exceptions_from_the_job_propagate(clock: FakeClock) -> None:
    with pytest.raises(RuntimeError, match="boom"):
        run(stored_job(sample_jobs.explode, "boom"), clock)


@pytest.fixture
def loop_in_thread() -> Iterator[asyncio.AbstractEventLoop]:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    yield loop
    loop.call_soon_threadsafe(loop.stop)
    thread.join()
    loop.close()


def test_an_async_job_can_run_on_a_loop_running_in_another_thread(
    clock: FakeClock, loop_in_thread: asyncio.AbstractEventLoop
) -> None:
    job = stored_job(sample_jobs.async_tenant, tenant_id="acme")
    assert run(job, clock, loop=loop_in_thread) == ["acme", "acme"]


def test_an_async_jobs_keyboard_interrupt_reaches_the_caller_and_the_loop_keeps_running(
    clock: FakeClock, loop_in_thread: asyncio.AbstractEventLoop
) -> None:
    raised: list[BaseException] = []

    def call() -> None:  # on a thread of its own: a dead loop would leave it waiting
        try:
            run(stored_job(sample_jobs.async_interrupt), clock, loop=loop_in_thread)
        except BaseException as error:
            raised.append(error)

    caller = threading.Thread(target=call, daemon=True)
    caller.start()
    caller.join(5.0)
    assert [type(error) for error in raised] == [KeyboardInterrupt]
    assert loop_in_thread.is_running()
    assert run(stored_job(sample_jobs.async_add, 1, 1), clock, loop=loop_in_thread) == 2


def test_an_async_job_can_run_on_an_idle_supplied_loop(clock: FakeClock) -> None:
    loop = asyncio.new_event_loop()
    try:
        assert run(stored_job(sample_jobs.async_add, 1, 1), clock, loop=loop) == 2
    finally:
        loop.close()


def test_blocking_on_the_loop_from_inside_it_is_refused(clock: FakeClock) -> None:
    job = stored_job(sample_jobs.async_add, 1, 1)

    async def inside() -> None:
        run(job, clock, loop=asyncio.get_running_loop())

    with pytest.raises(RuntimeError, match="would block the event loop"):
        asyncio.run(inside())


def test_a_missing_target_makes_the_job_unrunnable() -> None:
    job = replace(stored_job(sample_jobs.add, 1, 2), invocation=Invocation(target="gone.module:fn"))
    with pytest.raises(UnresolvableTarget, match=r"cannot import module 'gone.module'"):
        prepare(job)


def test_arguments_that_no_longer_fit_make_the_job_unrunnable() -> None:
    job = replace(
        stored_job(sample_jobs.add, 1, 2),
        invocation=Invocation(target=sample_jobs.add.target, kwargs={"c": 1}),
    )
    with pytest.raises(InvalidStoredArguments):
        prepare(job)


def test_a_claimed_job_runs_end_to_end(
    client: JobClient, storage: MemoryStorage, clock: FakeClock
) -> None:
    sample_jobs.send_confirmation.enqueue("42")
    job = claim(storage)
    run(job, clock)
    assert sample_jobs.calls == [("send_confirmation", "42")]
