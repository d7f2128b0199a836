"""The job client: every shape, validated before the one write it makes."""

from __future__ import annotations

from dataclasses import fields, replace
from datetime import UTC, datetime, timedelta, timezone
from typing import Any
from uuid import UUID, uuid4

import pytest

from millrace_django.clock import FakeClock
from millrace_django.contract import JobQuery, JobRecord, JobState
from millrace_django.engine import (
    DuplicateIdempotencyKey,
    EngineSettings,
    InvalidCron,
    InvalidSchedule,
    JobClient,
    JobNotFinished,
    Retry,
    UnknownQueue,
    UnknownTimezone,
    UnserializableArgument,
    outcomes,
    tenant,
)
from millrace_django.errors import ParentJobNotFound
from millrace_django.storage.memory import MemoryStorage
from tests.unit.engine import sample_jobs
from tests.unit.engine.helpers import claim


def all_jobs(storage: MemoryStorage) -> list[JobRecord]:
    return [j for j in (storage.get_job(s.id) for s in storage.query_jobs(JobQuery()).items) if j]


def succeed(storage: MemoryStorage, clock: FakeClock, config: EngineSettings) -> JobRecord:
    job = claim(storage)
    assert storage.apply(outcomes.succeeded(job, None, clock=clock, config=config))
    finished = storage.get_job(job.id)
    assert finished is not None
    return finished


# -- enqueue ----------------------------------------------------------------------------


def test_enqueue_stores_a_ready_job_minted_from_the_clock(
    client: JobClient, storage: MemoryStorage, clock: FakeClock
) -> None:
    job_id = sample_jobs.send_confirmation.enqueue("42")
    job = storage.get_job(job_id)
    assert job is not None
    assert job.state is JobState.ENQUEUED
    assert job.created_at == clock.now()
    assert job.invocation.target == "tests.unit.engine.sample_jobs:send_confirmation"
    assert job.invocation.args == ("42",)
    assert (job.queue, job.priority, job.retry) == ("default", 0, Retry.exponential(3))
    assert (job.tenant_id, job.idempotency_key, job.timeout) == (None, None, None)
    assert job_id.version == 7


def test_decoration_options_travel_with_the_job(client: JobClient, storage: MemoryStorage) -> None:
    job = storage.get_job(sample_jobs.send_invoice.enqueue("42", copies=2))
    assert job is not None
    assert (job.queue, job.priority, job.timeout) == ("emails", 5, timedelta(minutes=2))
    assert job.retry == Retry.fixed(timedelta(seconds=30), 3)
    assert job.invocation.kwargs == {"copies": 2}


def test_using_overrides_options_for_one_call(client: JobClient, storage: MemoryStorage) -> None:
    configured = sample_jobs.send_invoice.using(queue="default", priority=-1, retry=Retry.none())
    job = storage.get_job(configured.enqueue("42"))
    assert job is not None
    assert (job.queue, job.priority, job.retry) == ("default", -1, Retry.none())
    assert job.timeout == timedelta(minutes=2)  # not overridden, so the decoration's


def test_the_client_accepts_jobs_explicitly(client: JobClient, storage: MemoryStorage) -> None:
    job = storage.get_job(client.enqueue(sample_jobs.add, 1, b=2))
    assert job is not None and job.invocation.args == (1, 2)
    with pytest.raises(TypeError, match="decorate the function with @job"):
        client.enqueue(sample_jobs.not_a_job, "1")  # type: ignore[arg-type]


def test_the_ambient_tenant_is_captured(client: JobClient, storage: MemoryStorage) -> None:
    with tenant("acme"):
        job_id = sample_jobs.send_confirmation.enqueue("42")
    job = storage.get_job(job_id)
    assert job is not None and job.tenant_id == "acme"


def test_an_unknown_queue_is_refused_at_the_call(client: JobClient, storage: MemoryStorage) -> None:
    with pytest.raises(UnknownQueue, match=r"'reports' is not configured.*default, emails"):
        sample_jobs.add.using(queue="reports").enqueue(1, 2)
    assert all_jobs(storage) == []


def test_a_client_whose_default_queue_is_not_configured_is_refused(
    storage: MemoryStorage, clock: FakeClock
) -> None:
    class Settings:
        queues = frozenset({"emails"})
        default_queue = "default"
        default_retry = Retry.none()
        interruption_limit = 10

    with pytest.raises(UnknownQueue):
        JobClient(storage, clock, Settings())


# -- idempotency ------------------------------------------------------------------------


def test_an_active_key_returns_the_holder_instead_of_a_new_job(
    client: JobClient, storage: MemoryStorage
) -> None:
    first = sample_jobs.send_confirmation.enqueue("42", idempotency_key="order-42")
    second = sample_jobs.send_confirmation.enqueue("42", idempotency_key="order-42")
    assert second == first
    assert len(all_jobs(storage)) == 1


def test_keys_are_scoped_by_tenant(client: JobClient, storage: MemoryStorage) -> None:
    untenanted = sample_jobs.add.enqueue(1, 2, idempotency_key="k")
    with tenant("acme"):
        acme = sample_jobs.add.enqueue(1, 2, idempotency_key="k")
        assert sample_jobs.add.enqueue(1, 2, idempotency_key="k") == acme
    assert len({untenanted, acme}) == 2


def test_a_key_may_come_from_using(client: JobClient, storage: MemoryStorage) -> None:
    first = sample_jobs.add.using(idempotency_key="k").enqueue(1, 2)
    assert sample_jobs.add.enqueue(1, 2, idempotency_key="k") == first
    with pytest.raises(ValueError, match="give it once"):
        sample_jobs.add.using(idempotency_key="k").enqueue(1, 2, idempotency_key="other")


def test_a_blank_key_is_refused(client: JobClient) -> None:
    with pytest.raises(ValueError, match="non-blank"):
        sample_jobs.add.enqueue(1, 2, idempotency_key=" ")


# -- schedule ---------------------------------------------------------------------------


def test_schedule_with_a_delay_is_due_that_long_from_now(
    client: JobClient, storage: MemoryStorage, clock: FakeClock
) -> None:
    job = storage.get_job(sample_jobs.add.schedule(1, 2, delay=timedelta(minutes=5)))
    assert job is not None
    assert job.state is JobState.SCHEDULED
    assert job.due_at == clock.now() + timedelta(minutes=5)


def test_schedule_at_an_aware_time_stores_it_in_utc(
    client: JobClient, storage: MemoryStorage
) -> None:
    at = datetime(2026, 6, 1, 9, 0, tzinfo=timezone(timedelta(hours=2)))
    job = storage.get_job(sample_jobs.add.schedule(1, 2, at=at))
    assert job is not None and job.due_at == datetime(2026, 6, 1, 7, 0, tzinfo=UTC)
    assert job.due_at.tzinfo is UTC


def test_schedule_in_the_past_is_allowed_and_due_at_once(
    client: JobClient, storage: MemoryStorage, clock: FakeClock
) -> None:
    past = clock.now() - timedelta(days=1)
    job = storage.get_job(sample_jobs.add.schedule(1, 2, at=past))
    assert job is not None and job.due_at == past
    assert storage.activate_due(clock.now(), 10) == 1


@pytest.mark.parametrize(
    ("when", "message"),
    [
        ({"delay": timedelta(seconds=-1)}, "must not be negative"),
        ({"at": datetime(2026, 6, 1, 9, 0)}, "naive"),
        ({}, "exactly one"),
        ({"delay": timedelta(0), "at": datetime(2026, 6, 1, tzinfo=UTC)}, "exactly one"),
        ({"delay": 5}, "must be a timedelta"),
    ],
)
def test_bad_due_times_are_refused_and_nothing_is_written(
    client: JobClient, storage: MemoryStorage, when: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidSchedule, match=message):
        sample_jobs.add.schedule(1, 2, **when)
    assert all_jobs(storage) == []


# -- continuations ----------------------------------------------------------------------


def test_a_continuation_waits_for_its_parent_then_becomes_ready(
    client: JobClient, storage: MemoryStorage, clock: FakeClock, config: EngineSettings
) -> None:
    parent = sample_jobs.add.enqueue(1, 2)
    child = client.continue_with(parent, sample_jobs.send_confirmation, "42")
    waiting = storage.get_job(child)
    assert waiting is not None
    assert (waiting.state, waiting.parent_id) == (JobState.AWAITING, parent)
    succeed(storage, clock, config)
    ready = storage.get_job(child)
    assert ready is not None and ready.state is JobState.ENQUEUED


def test_a_continuation_of_a_missing_parent_is_refused(client: JobClient) -> None:
    with pytest.raises(ParentJobNotFound):
        client.continue_with(uuid4(), sample_jobs.add, 1, 2)
    with pytest.raises(TypeError, match="UUID"):
        client.continue_with("not-an-id", sample_jobs.add, 1, 2)  # type: ignore[arg-type]


# -- batches ----------------------------------------------------------------------------


class CountingStorage(MemoryStorage):
    def __init__(self, clock: FakeClock) -> None:
        super().__init__(clock)
        self.enqueue_calls = 0

    def enqueue(self, jobs: Any) -> list[UUID]:
        self.enqueue_calls += 1
        return super().enqueue(jobs)


@pytest.fixture
def counting(clock: FakeClock, config: EngineSettings) -> tuple[JobClient, CountingStorage]:
    storage = CountingStorage(clock)
    return JobClient(storage, clock, config), storage


def test_a_batch_is_stored_in_one_write_with_ids_in_order(
    counting: tuple[JobClient, CountingStorage], clock: FakeClock
) -> None:
    client, storage = counting
    with client.batch() as batch:
        assert batch.enqueue(sample_jobs.add, 1, 2) == 0
        assert batch.schedule(sample_jobs.add, 3, 4, delay=timedelta(hours=1)) == 1
        assert storage.enqueue_calls == 0
    assert storage.enqueue_calls == 1
    first, second = (storage.get_job(job_id) for job_id in batch.ids)
    assert first is not None and first.invocation.args == (1, 2)
    assert second is not None and second.due_at == clock.now() + timedelta(hours=1)


def test_a_batch_left_by_an_exception_writes_nothing(
    counting: tuple[JobClient, CountingStorage],
) -> None:
    client, storage = counting
    with pytest.raises(RuntimeError), client.batch() as batch:
        batch.enqueue(sample_jobs.add, 1, 2)
        raise RuntimeError("changed my mind")
    assert storage.enqueue_calls == 0
    assert batch.ids == []


def test_an_empty_batch_makes_no_storage_call(
    counting: tuple[JobClient, CountingStorage],
) -> None:
    client, storage = counting
    with client.batch() as batch:
        pass
    assert (batch.ids, storage.enqueue_calls) == ([], 0)


def test_a_batch_refuses_a_repeated_key_before_any_write(
    counting: tuple[JobClient, CountingStorage],
) -> None:
    client, storage = counting
    with pytest.raises(DuplicateIdempotencyKey, match="'k'"), client.batch() as batch:
        batch.enqueue(sample_jobs.add, 1, 2, idempotency_key="k")
        batch.enqueue(sample_jobs.add, 3, 4, idempotency_key="k")
    assert storage.enqueue_calls == 0


def test_the_same_key_in_two_tenants_is_fine_in_one_batch(
    counting: tuple[JobClient, CountingStorage],
) -> None:
    client, _ = counting
    with client.batch() as batch:
        batch.enqueue(sample_jobs.add, 1, 2, idempotency_key="k")
        with tenant("acme"):
            batch.enqueue(sample_jobs.add, 1, 2, idempotency_key="k")
    assert len(set(batch.ids)) == 2


def test_a_batch_returns_the_holders_id_for_a_held_key(
    counting: tuple[JobClient, CountingStorage],
) -> None:
    client, _ = counting
    holder = client.enqueue(sample_jobs.add, 1, 2, idempotency_key="k")
    with client.batch() as batch:
        batch.enqueue(sample_jobs.add, 1, 2)
        batch.enqueue(sample_jobs.add, 1, 2, idempotency_key="k")
    assert batch.ids[1] == holder != batch.ids[0]


def test_a_bad_item_fails_at_the_add_and_a_closed_batch_takes_no_more(
    counting: tuple[JobClient, CountingStorage],
) -> None:
    client, storage = counting
    with pytest.raises(UnserializableArgument), client.batch() as batch:
        batch.enqueue(sample_jobs.add, 1, 2)
        batch.enqueue(sample_jobs.add, 1, {2})
    assert storage.enqueue_calls == 0
    with pytest.raises(RuntimeError, match="closed"):
        batch.enqueue(sample_jobs.add, 1, 2)


# -- recurring --------------------------------------------------------------------------


def test_upsert_recurring_stores_the_definition_due_at_the_next_occurrence(
    client: JobClient, storage: MemoryStorage, clock: FakeClock
) -> None:
    with tenant("acme"):
        client.upsert_recurring(
            "nightly",
            sample_jobs.send_invoice,
            cron="0 3 * * *",
            timezone="Europe/Paris",
            priority=2,
            args=["42"],
            kwargs={"copies": 2},
        )
    record = storage.get_recurring("nightly")
    assert record is not None
    assert record.next_fire_time == datetime(2026, 1, 1, 2, 0, tzinfo=UTC)  # 03:00 CET
    assert (record.cron, record.timezone, record.tenant_id) == ("0 3 * * *", "Europe/Paris", "acme")
    assert (record.queue, record.priority) == ("emails", 2)
    assert record.retry == Retry.fixed(timedelta(seconds=30), 3)
    assert record.invocation.args == ("42",) and record.invocation.kwargs == {"copies": 2}
    assert record.created_at == record.updated_at == clock.now()


def test_re_upserting_the_same_schedule_keeps_the_pending_fire_time(
    client: JobClient, storage: MemoryStorage, clock: FakeClock
) -> None:
    client.upsert_recurring("hourly", sample_jobs.add, cron="0 * * * *", args=[1, 2])
    first = storage.get_recurring("hourly")
    clock.advance(timedelta(hours=3))
    client.upsert_recurring("hourly", sample_jobs.add, cron="0 * * * *", args=[1, 2])
    again = storage.get_recurring("hourly")
    assert first is not None and again is not None
    assert again.next_fire_time == first.next_fire_time
    client.upsert_recurring("hourly", sample_jobs.add, cron="30 * * * *", args=[1, 2])
    changed = storage.get_recurring("hourly")
    assert changed is not None and changed.next_fire_time == clock.now() + timedelta(minutes=30)


@pytest.mark.parametrize(
    ("change", "error", "message"),
    [
        ({"recurring_id": " "}, ValueError, "non-blank"),
        ({"cron": "0 0 30 2 *"}, InvalidCron, "no occurrence"),
        ({"cron": "every day"}, InvalidCron, "5 fields"),
        ({"timezone": "Nowhere/City"}, UnknownTimezone, "unknown time zone"),
        ({"queue": "reports"}, UnknownQueue, "reports"),
        ({"args": [(1,), 2]}, UnserializableArgument, "tuple"),
        ({"job": sample_jobs.add.using(idempotency_key="k")}, ValueError, "recurring id"),
        ({"job": sample_jobs.add.using(timeout=timedelta(1))}, ValueError, "@job"),
    ],
)
def test_bad_recurring_definitions_are_refused_and_nothing_is_stored(
    client: JobClient,
    storage: MemoryStorage,
    change: dict[str, Any],
    error: type[Exception],
    message: str,
) -> None:
    call: dict[str, Any] = {
        "recurring_id": "r",
        "job": sample_jobs.add,
        "cron": "* * * * *",
        "args": [1, 2],
    } | change
    with pytest.raises(error, match=message):
        client.upsert_recurring(call.pop("recurring_id"), call.pop("job"), **call)
    assert storage.get_recurring("r") is None


def test_trigger_enqueues_an_extra_occurrence_and_leaves_the_schedule_alone(
    client: JobClient, storage: MemoryStorage
) -> None:
    with tenant("acme"):
        client.upsert_recurring("nightly", sample_jobs.send_invoice, cron="0 3 * * *", args=["42"])
    before = storage.get_recurring("nightly")
    assert client.trigger_recurring("nightly") is True
    assert storage.get_recurring("nightly") == before
    (fired,) = all_jobs(storage)
    assert fired.recurring_id == "nightly"
    assert (fired.queue, fired.priority, fired.tenant_id) == ("emails", 5, "acme")
    assert fired.timeout == timedelta(minutes=2)  # from the definition
    assert fired.idempotency_key is None
    assert client.trigger_recurring("unknown") is False


def test_remove_recurring_reports_whether_it_existed(
    client: JobClient, storage: MemoryStorage
) -> None:
    client.upsert_recurring("r", sample_jobs.add, cron="* * * * *", args=[1, 2])
    assert client.remove_recurring("r") is True
    assert client.remove_recurring("r") is False
    assert storage.get_recurring("r") is None


# -- management -------------------------------------------------------------------------


def test_cancel_and_run_now_go_through_the_storage_atomics(
    client: JobClient, storage: MemoryStorage, clock: FakeClock, config: EngineSettings
) -> None:
    waiting = sample_jobs.add.enqueue(1, 2)
    assert client.cancel(waiting) is True
    assert client.cancel(waiting) is False
    assert client.run_now(waiting) is False

    sample_jobs.explode.enqueue("boom")
    job = claim(storage)
    storage.apply(outcomes.failed(job, RuntimeError("boom"), clock=clock, config=config))
    assert client.run_now(job.id) is True
    refreshed = storage.get_job(job.id)
    assert refreshed is not None and refreshed.state is JobState.ENQUEUED


def test_requeue_mints_a_new_job_carrying_what_identifies_the_work(
    client: JobClient, storage: MemoryStorage, clock: FakeClock, config: EngineSettings
) -> None:
    with tenant("acme"):
        original_id = sample_jobs.send_invoice.enqueue("42", idempotency_key="inv-42")
    original = claim(storage)
    storage.apply(outcomes.cancelled(original, clock=clock))
    clock.advance(timedelta(minutes=1))

    copy_id = client.requeue(original_id)
    assert copy_id is not None and copy_id != original_id
    copy = storage.get_job(copy_id)
    assert copy is not None
    assert copy.state is JobState.ENQUEUED
    assert copy.requeued_from == original_id
    assert copy.created_at == clock.now()
    assert (copy.idempotency_key, copy.tenant_id) == ("inv-42", "acme")
    assert (copy.queue, copy.priority, copy.retry, copy.timeout) == (
        original.queue,
        original.priority,
        original.retry,
        original.timeout,
    )
    assert copy.invocation == original.invocation
    assert (copy.attempt, copy.failures, copy.last_error) == (0, 0, None)


def test_a_built_record_holds_every_field_of_its_own(client: JobClient) -> None:
    first = client.build(sample_jobs.add, (1, 2), {}, state=JobState.ENQUEUED, key=None)
    second = client.build(sample_jobs.add, (3, 4), {}, state=JobState.ENQUEUED, key=None)
    every = {f.name for f in fields(JobRecord)}
    assert first.__dict__.keys() == second.__dict__.keys() == every
    assert first.__dict__ is not second.__dict__  # each its own copy of the template
    assert (first.invocation.args, second.invocation.args) == ((1, 2), (3, 4))


def test_requeue_keeps_the_recurring_id_and_drops_parent_and_workflow_links(
    client: JobClient, storage: MemoryStorage, clock: FakeClock, config: EngineSettings
) -> None:
    linked = replace(
        client.build(sample_jobs.add, (1, 2), {}, state=JobState.ENQUEUED, key=None),
        recurring_id="nightly",
        workflow_instance_id=uuid4(),
        activity_node_id="step-1",
    )
    storage.enqueue([linked])
    succeed(storage, clock, config)
    copy = storage.get_job(client.requeue(linked.id) or uuid4())
    assert copy is not None
    assert copy.recurring_id == "nightly"
    assert (copy.workflow_instance_id, copy.activity_node_id, copy.parent_id) == (None, None, None)

    child = client.continue_with(copy.id, sample_jobs.add, 3, 4)
    succeed(storage, clock, config)  # the copy
    succeed(storage, clock, config)  # its continuation
    child_copy = storage.get_job(client.requeue(child) or uuid4())
    assert child_copy is not None and child_copy.parent_id is None
    assert child_copy.state is JobState.ENQUEUED


def test_requeue_refuses_unfinished_jobs_including_failed_ones(
    client: JobClient, storage: MemoryStorage, clock: FakeClock, config: EngineSettings
) -> None:
    waiting = sample_jobs.add.enqueue(1, 2)
    with pytest.raises(JobNotFinished, match="is enqueued"):
        client.requeue(waiting)
    job = claim(storage)
    with pytest.raises(JobNotFinished, match="is processing"):
        client.requeue(job.id)
    storage.apply(outcomes.failed(job, RuntimeError("x"), clock=clock, config=config))
    with pytest.raises(JobNotFinished, match=r"is failed.*run_now"):
        client.requeue(job.id)


def test_requeue_of_an_unknown_job_is_none(client: JobClient) -> None:
    assert client.requeue(uuid4()) is None
