"""Operating recurring definitions through the client: disable, enable, edit; and run now
for a delayed job."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from millrace_django import jobs
from millrace_django.clock import FakeClock
from millrace_django.contract import Invocation, JobState
from millrace_django.engine import JobClient
from millrace_django.engine.errors import InvalidCron, InvalidJobArguments, UnknownTimezone
from millrace_django.runtime.scheduler import fire_due_recurring
from millrace_django.storage.memory import MemoryStorage
from tests.unit.engine import sample_jobs

START = datetime(2026, 1, 1, tzinfo=UTC)


def _hourly(client: JobClient) -> None:
    client.upsert_recurring(
        "hourly", sample_jobs.send_invoice, cron="0 * * * *", args=("42",), kwargs={"copies": 2}
    )


def test_a_disabled_definition_misses_its_occurrences_and_resumes_after_the_enable(
    client: JobClient, storage: MemoryStorage, clock: FakeClock
) -> None:
    _hourly(client)
    assert client.disable_recurring("hourly") is True
    clock.advance(timedelta(hours=5, minutes=20))

    assert fire_due_recurring(storage, clock, clock.now(), 10) == 0
    assert client.enable_recurring("hourly") is True

    stored = storage.get_recurring("hourly")
    assert stored is not None and stored.enabled
    assert stored.next_fire_time == START + timedelta(hours=6)
    assert fire_due_recurring(storage, clock, clock.now(), 10) == 0
    clock.advance(timedelta(minutes=40))
    assert fire_due_recurring(storage, clock, clock.now(), 10) == 1


def test_disable_and_enable_of_an_unknown_definition_report_false(client: JobClient) -> None:
    assert client.disable_recurring("nope") is False
    assert client.enable_recurring("nope") is False


def test_an_edit_changes_the_schedule_and_arguments_and_keeps_the_rest(
    client: JobClient, storage: MemoryStorage, clock: FakeClock
) -> None:
    _hourly(client)
    before = storage.get_recurring("hourly")
    clock.advance(timedelta(minutes=10))

    assert client.edit_recurring(
        "hourly", cron="30 9 * * *", timezone="Europe/Paris", args=["7"], kwargs={}
    )

    after = storage.get_recurring("hourly")
    assert before is not None and after is not None
    assert (after.cron, after.timezone) == ("30 9 * * *", "Europe/Paris")
    assert after.next_fire_time == datetime(2026, 1, 1, 8, 30, tzinfo=UTC)
    assert after.invocation == Invocation(target=sample_jobs.send_invoice.target, args=("7",))
    assert (after.queue, after.priority, after.created_at) == (
        before.queue,
        before.priority,
        before.created_at,
    )
    assert after.updated_at == clock.now()


def test_an_edit_of_the_arguments_alone_keeps_the_pending_fire_time(
    client: JobClient, storage: MemoryStorage
) -> None:
    _hourly(client)
    before = storage.get_recurring("hourly")

    assert client.edit_recurring("hourly", kwargs={"order_id": "9"})

    after = storage.get_recurring("hourly")
    assert before is not None and after is not None
    assert after.next_fire_time == before.next_fire_time
    assert after.invocation == Invocation(target=sample_jobs.send_invoice.target, args=("9",))
    assert after.cron == before.cron


@pytest.mark.parametrize(
    ("change", "error"),
    [
        ({"cron": "61 * * * *"}, InvalidCron),
        ({"timezone": "Mars/Olympus"}, UnknownTimezone),
        ({"args": ["1", "2", "3"]}, InvalidJobArguments),
        ({"kwargs": {"order_id": object()}}, InvalidJobArguments),
    ],
)
def test_an_invalid_edit_raises_and_changes_nothing(
    client: JobClient, storage: MemoryStorage, change: dict[str, object], error: type[Exception]
) -> None:
    _hourly(client)
    before = storage.get_recurring("hourly")

    with pytest.raises(error):
        client.edit_recurring("hourly", **change)  # type: ignore[arg-type]

    assert storage.get_recurring("hourly") == before


def test_an_edit_of_an_unknown_definition_reports_false_and_creates_nothing(
    client: JobClient, storage: MemoryStorage
) -> None:
    assert client.edit_recurring("nope", cron="0 * * * *") is False
    assert storage.get_recurring("nope") is None


def test_run_now_enqueues_a_delayed_job_before_its_time(
    client: JobClient, storage: MemoryStorage
) -> None:
    job_id = sample_jobs.send_confirmation.schedule("42", delay=timedelta(hours=3))

    assert client.run_now(job_id) is True

    stored = storage.get_job(job_id)
    assert stored is not None and stored.state is JobState.ENQUEUED
    assert client.run_now(job_id) is False


def test_the_jobs_module_operates_definitions_through_the_default_client(
    client: JobClient, storage: MemoryStorage
) -> None:
    _hourly(client)

    assert jobs.disable_recurring("hourly") is True
    assert jobs.edit_recurring("hourly", cron="5 * * * *") is True
    disabled = storage.get_recurring("hourly")
    assert disabled is not None and (disabled.enabled, disabled.cron) == (False, "5 * * * *")
    assert jobs.enable_recurring("hourly") is True
    assert jobs.enable_recurring("gone") is False
