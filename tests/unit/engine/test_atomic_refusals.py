"""Atomic jobs are refused wherever their writes could not join the job's transaction:
at decoration, at every way of creating a job, by the worker, and by the system check."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.core.checks import Error

from millrace_django.checks import check_settings
from millrace_django.clock import FakeClock
from millrace_django.contract import JobQuery, JobState
from millrace_django.engine import InvalidJobDefinition, JobClient, job
from millrace_django.engine.errors import AtomicJobRefused
from millrace_django.storage.memory import MemoryStorage
from millrace_django.testing import JobRunner
from tests.integration import atomic_jobs
from tests.unit.engine import sample_jobs


def test_an_async_function_cannot_be_atomic() -> None:
    async def bump() -> None: ...

    bump.__qualname__ = "bump"  # as if at module level: only atomic is refused here
    with pytest.raises(InvalidJobDefinition, match="needs a plain \\(sync\\) function"):
        job(atomic=True)(bump)


def test_an_atomic_function_cannot_take_a_hard_timeout() -> None:
    def bump() -> None: ...

    bump.__qualname__ = "bump"
    with pytest.raises(InvalidJobDefinition, match="cannot go with hard_timeout"):
        job(atomic=True, hard_timeout=5)(bump)


def test_atomic_takes_a_boolean() -> None:
    def bump() -> None: ...

    bump.__qualname__ = "bump"
    with pytest.raises(TypeError, match="atomic must be True or False"):
        job(atomic=1)(bump)  # type: ignore[call-overload]


def test_a_plain_job_is_not_atomic() -> None:
    assert sample_jobs.send_confirmation.atomic is False
    assert atomic_jobs.bump.atomic is True


def test_every_way_of_creating_an_atomic_job_on_the_memory_storage_is_refused(
    client: JobClient, storage: MemoryStorage
) -> None:
    bump = atomic_jobs.bump
    with pytest.raises(AtomicJobRefused, match="cannot join a transaction"):
        client.enqueue(bump, "default", "c")
    with pytest.raises(AtomicJobRefused):
        client.schedule(bump, "default", "c", delay=timedelta(minutes=1))
    with pytest.raises(AtomicJobRefused), client.batch() as batch:
        batch.enqueue(bump, "default", "c")
    with pytest.raises(AtomicJobRefused):
        client.upsert_recurring("hourly", bump, cron="0 * * * *", args=["default", "c"])
    with pytest.raises(AtomicJobRefused), client.batch(bump, on_complete_args=["c"]) as batch:
        batch.enqueue(sample_jobs.send_confirmation, "42")
    assert storage.query_jobs(JobQuery()).items == []
    assert storage.get_recurring("hourly") is None


def test_a_hard_timeout_given_at_the_call_is_refused_for_an_atomic_job(
    client: JobClient,
) -> None:
    with pytest.raises(AtomicJobRefused, match="cannot take a hard timeout"):
        client.enqueue(atomic_jobs.bump.using(hard_timeout=5), "default", "c")


def test_an_atomic_job_stored_anyway_ends_dead_at_its_first_claim_saying_why() -> None:
    clock = FakeClock()
    runner = JobRunner(MemoryStorage(clock), clock)
    orm_client = JobClient(_JoinsNothing(runner.storage), clock, runner.config)
    record = orm_client.build(
        atomic_jobs.bump, ("default", "c"), {}, state=JobState.ENQUEUED, key=None
    )
    (job_id,) = runner.storage.enqueue([record])  # as another process would have

    runner.run_until_idle(throw_on_failure=False)

    dead = runner.assert_state(job_id, JobState.DEAD)
    assert dead.last_error is not None and "cannot join a transaction" in dead.last_error
    assert dead.attempt == 1


def test_the_system_check_names_the_atomic_jobs_a_memory_storage_cannot_run(
    settings: Any,
) -> None:
    settings.MILLRACE = {"STORAGE": "memory"}
    errors = [m for m in check_settings() if isinstance(m, Error)]
    assert atomic_jobs.bump.target in " ".join(e.msg for e in errors if e.id == "millrace.E012")
    assert all(e.hint for e in errors)


class _JoinsNothing:
    """Pretends its memory storage joins transactions, so a client builds the record
    the way a process with the ORM storage would."""

    def __init__(self, storage: Any) -> None:
        self._storage = storage

    def transaction(self) -> Any:
        raise AssertionError("never entered: the record is only built")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._storage, name)
