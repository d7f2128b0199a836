"""The scheduler's flow-control steps: it ends jobs past their deadline (also on queues
no worker claims from) and fires recurring definitions by their overlap policy."""

from __future__ import annotations

import logging
from datetime import timedelta

import pytest

from millrace_django.clock import FakeClock
from millrace_django.contract import (
    ClaimRequest,
    JobQuery,
    JobRecord,
    JobState,
    OverlapPolicy,
    expired_reason,
)
from millrace_django.engine import JobClient, outcomes
from millrace_django.runtime import RuntimeSettings, Scheduler
from millrace_django.storage.memory import MemoryStorage
from tests.unit.runtime import jobs

START = FakeClock.DEFAULT_START


def fired(storage: MemoryStorage, recurring_id: str) -> list[JobRecord]:
    found = (storage.get_job(s.id) for s in storage.query_jobs(JobQuery(limit=200)).items)
    return [job for job in found if job is not None and job.recurring_id == recurring_id]


def start_fired_job(storage: MemoryStorage, recurring_id: str) -> JobRecord:
    (claimed,) = storage.claim(
        ClaimRequest(
            worker_id="w1", queues=frozenset({"default"}), max_count=1, lease=timedelta(hours=2)
        )
    )
    assert claimed.recurring_id == recurring_id
    return claimed


def test_a_pass_ends_jobs_past_their_deadline_even_where_no_worker_claims(
    client: JobClient, storage: MemoryStorage, clock: FakeClock, settings: RuntimeSettings
) -> None:
    job_id = jobs.record.using(queue="emails").enqueue("late", expires=timedelta(minutes=1))
    clock.advance(timedelta(minutes=1))

    done = Scheduler(storage, clock, settings).run_once()

    assert done.expired == 1
    job = storage.get_job(job_id)
    assert job is not None and job.state is JobState.CANCELLED
    assert job.last_error == expired_reason(START + timedelta(minutes=1))


@pytest.mark.parametrize("overlap", ["skip", "queue"])
def test_an_occurrence_due_while_the_previous_runs_is_not_fired(
    client: JobClient,
    storage: MemoryStorage,
    clock: FakeClock,
    settings: RuntimeSettings,
    overlap: str,
    caplog: pytest.LogCaptureFixture,
) -> None:
    client.upsert_recurring("sync", jobs.record, cron="*/5 * * * *", args=["s"], overlap=overlap)
    scheduler = Scheduler(storage, clock, settings)
    clock.advance(timedelta(minutes=5))
    assert scheduler.run_once().fired == 1
    running = start_fired_job(storage, "sync")
    clock.advance(timedelta(minutes=5))

    with caplog.at_level(logging.INFO, logger="millrace_django.runtime.scheduler"):
        assert scheduler.run_once().fired == 0

    definition = storage.get_recurring("sync")
    assert definition is not None and definition.fired_job_id == running.id
    assert [job.state for job in fired(storage, "sync")] == [JobState.PROCESSING]
    if overlap == "skip":
        assert definition.last_skip_time == START + timedelta(minutes=10)
        assert definition.next_fire_time == START + timedelta(minutes=15)
        assert "skipped its occurrence" in caplog.text
    else:
        assert definition.next_fire_time == START + timedelta(minutes=10)
        assert definition.last_skip_time is None


def test_a_queued_occurrence_fires_at_the_first_pass_after_the_previous_job_ends(
    client: JobClient, storage: MemoryStorage, clock: FakeClock, settings: RuntimeSettings
) -> None:
    client.upsert_recurring("sync", jobs.record, cron="*/5 * * * *", args=["s"], overlap="queue")
    scheduler = Scheduler(storage, clock, settings)
    clock.advance(timedelta(minutes=5))
    scheduler.run_once()
    running = start_fired_job(storage, "sync")
    clock.advance(timedelta(minutes=12))  # two occurrences come due while it runs
    assert scheduler.run_once().fired == 0
    ended = outcomes.succeeded(running, None, clock=clock, config=settings)
    assert storage.apply(ended)
    assert scheduler.run_once().fired == 1

    definition = storage.get_recurring("sync")
    assert definition is not None
    assert definition.last_fire_time == START + timedelta(minutes=10)  # the held one
    assert definition.next_fire_time == START + timedelta(minutes=20)  # missed ones collapsed
    assert [job.state for job in fired(storage, "sync")].count(JobState.ENQUEUED) == 1


def test_an_unknown_overlap_policy_is_refused_with_the_choices(client: JobClient) -> None:
    with pytest.raises(ValueError, match="overlap must be one of 'allow', 'skip', 'queue'"):
        client.upsert_recurring("sync", jobs.record, cron="* * * * *", args=["s"], overlap="never")
    stored = client.storage.get_recurring("sync")
    assert stored is None
    client.upsert_recurring(
        "sync", jobs.record, cron="* * * * *", args=["s"], overlap=OverlapPolicy.SKIP
    )
    stored = client.storage.get_recurring("sync")
    assert stored is not None and stored.overlap is OverlapPolicy.SKIP
