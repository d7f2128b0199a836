"""Occurrences of a recurring definition, as the scheduler will fire them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from millrace_django.clock import FakeClock
from millrace_django.contract import Invocation, JobState, RecurringRecord, RetrySpec
from millrace_django.engine.recurring import FAR_FUTURE, following_fire_time, occurrence
from tests.unit.engine import sample_jobs


def definition(
    cron: str = "0 * * * *", target: str = sample_jobs.send_invoice.target
) -> RecurringRecord:
    now = FakeClock().now()
    return RecurringRecord(
        id="hourly",
        cron=cron,
        queue="emails",
        invocation=Invocation(target=target, args=("42",)),
        next_fire_time=now,
        created_at=now,
        updated_at=now,
        retry=RetrySpec(),
        priority=3,
        tenant_id="acme",
    )


def test_missed_occurrences_collapse_and_the_next_fire_is_computed_from_now() -> None:
    late = datetime(2026, 1, 1, 5, 20, tzinfo=UTC)  # five hourly occurrences were missed
    assert following_fire_time(definition(), late) == datetime(2026, 1, 1, 6, 0, tzinfo=UTC)


def test_a_cron_with_no_future_occurrence_parks_far_in_the_future() -> None:
    assert following_fire_time(definition("0 0 29 2 *"), datetime(2097, 3, 1, tzinfo=UTC)) == (
        FAR_FUTURE
    )


def test_an_occurrence_copies_the_definition_and_names_it(clock: FakeClock) -> None:
    clock.advance(timedelta(minutes=1))
    job = occurrence(definition(), clock)
    assert (job.state, job.recurring_id, job.created_at) == (
        JobState.ENQUEUED,
        "hourly",
        clock.now(),
    )
    assert (job.queue, job.priority, job.tenant_id) == ("emails", 3, "acme")
    assert job.invocation.args == ("42",)
    assert job.timeout == timedelta(minutes=2)  # from the @job definition
    assert job.idempotency_key is None


def test_an_occurrence_of_a_vanished_job_still_fires_without_a_timeout(clock: FakeClock) -> None:
    job = occurrence(definition(target="tests.unit.engine.gone:job"), clock)
    assert job.timeout is None
