"""Duplicate policies at the client: ``on_duplicate`` on enqueue, schedule and using."""

from __future__ import annotations

from datetime import timedelta

import pytest

from millrace_django.clock import FakeClock
from millrace_django.contract import JobQuery, JobState
from millrace_django.engine import JobClient
from millrace_django.errors import IdempotencyKeyHeld
from millrace_django.storage.memory import MemoryStorage
from tests.unit.engine import sample_jobs
from tests.unit.engine.helpers import claim


def test_reject_raises_with_the_holders_id_and_stores_nothing(
    client: JobClient, storage: MemoryStorage
) -> None:
    holder = sample_jobs.add.enqueue(1, 2, idempotency_key="k")
    with pytest.raises(IdempotencyKeyHeld, match=str(holder)) as raised:
        sample_jobs.add.enqueue(3, 4, idempotency_key="k", on_duplicate="reject")
    assert raised.value.holder_id == holder
    stored = storage.get_job(holder)
    assert stored is not None and stored.invocation.args == (1, 2)


def test_replace_through_using_rewrites_the_scheduled_holders_call_and_due_time(
    client: JobClient, storage: MemoryStorage, clock: FakeClock
) -> None:
    holder = sample_jobs.add.schedule(1, 2, delay=timedelta(hours=1), idempotency_key="k")
    replacing = sample_jobs.add.using(idempotency_key="k", on_duplicate="replace")
    assert replacing.schedule(5, 6, delay=timedelta(minutes=1)) == holder
    stored = storage.get_job(holder)
    assert stored is not None
    assert stored.invocation.args == (5, 6)
    assert (stored.state, stored.due_at) == (JobState.SCHEDULED, clock.now() + timedelta(minutes=1))


def test_replace_of_a_running_holder_raises_and_leaves_it_running(
    client: JobClient, storage: MemoryStorage
) -> None:
    holder = sample_jobs.add.enqueue(1, 2, idempotency_key="k")
    claim(storage)
    with pytest.raises(IdempotencyKeyHeld, match="processing, too late to replace"):
        sample_jobs.add.enqueue(3, 4, idempotency_key="k", on_duplicate="replace")
    stored = storage.get_job(holder)
    assert stored is not None and stored.state is JobState.PROCESSING


def test_the_default_policy_still_returns_the_holders_id(client: JobClient) -> None:
    holder = sample_jobs.add.enqueue(1, 2, idempotency_key="k")
    assert sample_jobs.add.enqueue(3, 4, idempotency_key="k", on_duplicate="return") == holder


def test_an_unknown_policy_is_refused_naming_the_choices(client: JobClient) -> None:
    with pytest.raises(ValueError, match="on_duplicate must be one of 'return', 'reject'"):
        sample_jobs.add.using(on_duplicate="overwrite")


def test_a_policy_without_a_key_is_refused_before_anything_is_written(
    client: JobClient, storage: MemoryStorage
) -> None:
    with pytest.raises(ValueError, match="needs an idempotency_key"):
        sample_jobs.add.enqueue(1, 2, on_duplicate="reject")
    assert storage.query_jobs(JobQuery()).items == []


def test_a_continuation_may_reject_a_duplicate_but_not_replace_its_holder(
    client: JobClient, storage: MemoryStorage
) -> None:
    parent = sample_jobs.add.enqueue(1, 2)
    holder = sample_jobs.add.enqueue(3, 4, idempotency_key="k")
    with pytest.raises(ValueError, match="cannot replace"):
        client.continue_with(
            parent, sample_jobs.add.using(idempotency_key="k", on_duplicate="replace"), 5, 6
        )
    with pytest.raises(IdempotencyKeyHeld):
        client.continue_with(
            parent, sample_jobs.add.using(idempotency_key="k", on_duplicate="reject"), 5, 6
        )
    stored = storage.get_job(holder)
    assert stored is not None and stored.invocation.args == (3, 4)
