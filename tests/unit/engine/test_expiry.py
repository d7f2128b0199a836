"""Expiry at the edge: ``expires=`` is checked where it is given and fixed when the job
is built; a job past its deadline ends cancelled without running, with its reason."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from millrace_django.clock import FakeClock
from millrace_django.contract import JobQuery, JobState, expired_reason
from millrace_django.engine import InvalidJobDefinition, InvalidSchedule, JobClient, job
from millrace_django.engine.recurring import occurrence
from millrace_django.storage.memory import MemoryStorage
from millrace_django.testing import JobRunner
from tests.unit.engine import sample_jobs

ran: list[str] = []


@job(expires=timedelta(minutes=5))
def refresh_quote(symbol: str) -> None:
    ran.append(symbol)


@job(expires=90)
def ping() -> None:
    ran.append("ping")


def stored_deadline(storage: MemoryStorage, job_id: object) -> datetime | None:
    stored = storage.get_job(job_id)  # type: ignore[arg-type]
    assert stored is not None
    return stored.expires_at


def test_a_delay_counts_from_now_for_an_enqueue_and_from_the_due_time_for_a_schedule(
    client: JobClient, storage: MemoryStorage, clock: FakeClock
) -> None:
    now = clock.now()
    enqueued = sample_jobs.send_confirmation.enqueue("1", expires=timedelta(minutes=2))
    in_seconds = sample_jobs.send_confirmation.enqueue("2", expires=30.5)
    scheduled = sample_jobs.send_confirmation.schedule(
        "3", delay=timedelta(hours=1), expires=timedelta(minutes=2)
    )
    plain = sample_jobs.send_confirmation.enqueue("4")

    assert stored_deadline(storage, enqueued) == now + timedelta(minutes=2)
    assert stored_deadline(storage, in_seconds) == now + timedelta(seconds=30.5)
    assert stored_deadline(storage, scheduled) == now + timedelta(hours=1, minutes=2)
    assert stored_deadline(storage, plain) is None


def test_an_aware_instant_is_stored_in_utc_and_must_come_after_the_due_time(
    client: JobClient, storage: MemoryStorage, clock: FakeClock
) -> None:
    paris = timezone(timedelta(hours=1))
    instant = (clock.now() + timedelta(hours=2)).astimezone(paris)

    job_id = sample_jobs.send_confirmation.enqueue("1", expires=instant)

    assert stored_deadline(storage, job_id) == instant
    assert stored_deadline(storage, job_id).tzinfo is UTC  # type: ignore[union-attr]
    with pytest.raises(InvalidSchedule, match="not after the job is due"):
        sample_jobs.send_confirmation.schedule("2", delay=timedelta(hours=3), expires=instant)
    with pytest.raises(InvalidSchedule, match="could never start"):
        sample_jobs.send_confirmation.enqueue("3", expires=clock.now())


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (0, "positive delay"),
        (-5, "positive delay"),
        (timedelta(0), "positive delay"),
        (float("nan"), "finite number of seconds"),
        (float("inf"), "finite number of seconds"),
        (datetime(2030, 1, 1), "is naive"),
        (True, "a delay"),
        ("5m", "a delay"),
    ],
)
def test_a_bad_deadline_is_refused_before_anything_is_written(
    client: JobClient, storage: MemoryStorage, value: object, message: str
) -> None:
    with pytest.raises(InvalidSchedule, match=message):
        sample_jobs.send_confirmation.enqueue("1", expires=value)  # type: ignore[arg-type]
    with pytest.raises(InvalidSchedule, match=message):
        sample_jobs.send_confirmation.using(expires=value)  # type: ignore[arg-type]
    assert storage.query_jobs(JobQuery()).items == []


def test_a_job_default_is_a_delay_and_using_or_the_call_overrides_it(
    client: JobClient, storage: MemoryStorage, clock: FakeClock
) -> None:
    now = clock.now()
    default = refresh_quote.enqueue("ACME")
    configured = refresh_quote.using(expires=timedelta(hours=1)).enqueue("ACME")
    called = refresh_quote.enqueue("ACME", expires=10)
    seconds = ping.enqueue()

    assert stored_deadline(storage, default) == now + timedelta(minutes=5)
    assert stored_deadline(storage, configured) == now + timedelta(hours=1)
    assert stored_deadline(storage, called) == now + timedelta(seconds=10)
    assert stored_deadline(storage, seconds) == now + timedelta(seconds=90)
    with pytest.raises(InvalidSchedule, match="no fixed instant"):
        job(expires=datetime(2030, 1, 1, tzinfo=UTC))  # type: ignore[arg-type]


def test_a_job_function_may_not_take_a_parameter_named_expires() -> None:
    def quote(expires: int) -> None: ...

    with pytest.raises(InvalidJobDefinition, match="expires"):
        job(quote)


def test_a_recurring_occurrence_takes_the_job_default_from_its_fire(
    client: JobClient, storage: MemoryStorage, clock: FakeClock
) -> None:
    client.upsert_recurring("quotes", refresh_quote, cron="*/5 * * * *", args=["ACME"])
    record = storage.get_recurring("quotes")
    assert record is not None
    clock.advance(timedelta(minutes=7))

    fired = occurrence(record, clock)

    assert fired.expires_at == clock.now() + timedelta(minutes=5)
    with pytest.raises(ValueError, match=r"@job\(expires=\.\.\.\)"):
        client.upsert_recurring(
            "other", refresh_quote.using(expires=60), cron="*/5 * * * *", args=["X"]
        )


def test_a_job_not_started_by_its_deadline_ends_cancelled_with_the_reason_and_never_runs(
    storage: MemoryStorage, clock: FakeClock
) -> None:
    ran.clear()
    runner = JobRunner(storage=storage, clock=clock)
    with runner.installed():
        late = refresh_quote.enqueue("LATE")
        on_time = refresh_quote.enqueue("ON-TIME", expires=timedelta(hours=1))
        runner.advance(timedelta(minutes=5))
        runner.run_until_idle()

    expired = runner.assert_state(late, JobState.CANCELLED)
    assert expired.last_error == expired_reason(clock.now())
    assert expired.finished_at == clock.now()
    runner.assert_succeeded(on_time)
    assert ran == ["ON-TIME"]
