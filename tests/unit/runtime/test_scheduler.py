"""The scheduler: due activation, cron fires exactly once per occurrence, retention of
jobs and of the worker registry."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime, timedelta

import pytest

from millrace_django.clock import Clock, CorrectedClock, FakeClock
from millrace_django.contract import (
    ClaimRequest,
    Invocation,
    JobQuery,
    JobRecord,
    JobState,
    RecurringRecord,
)
from millrace_django.engine import JobClient, outcomes
from millrace_django.engine.recurring import FAR_FUTURE
from millrace_django.runtime import Hooks, RuntimeSettings, Scheduler, scheduler
from millrace_django.runtime.scheduler import (
    FORGET_WORKERS_EVERY,
    SHORTEST_PAUSE,
    SchedulerPass,
    housekeeping_due,
    pause,
)
from millrace_django.runtime.worker_registry import WorkerRegistration
from millrace_django.storage.memory import MemoryStorage
from tests.unit.runtime import jobs
from tests.unit.runtime.helpers import TIMEOUT, stored, wait_until

START = FakeClock.DEFAULT_START


def fired_records(storage: MemoryStorage, recurring_id: str) -> list[JobRecord]:
    page = storage.query_jobs(JobQuery(limit=200))
    return [
        job
        for job in (storage.get_job(summary.id) for summary in page.items)
        if job is not None and job.recurring_id == recurring_id
    ]


def fired_jobs(storage: MemoryStorage, recurring_id: str) -> list[JobState]:
    return [job.state for job in fired_records(storage, recurring_id)]


def test_due_jobs_are_activated_in_several_batches_within_one_pass(
    client: JobClient, storage: MemoryStorage, clock: FakeClock, settings: RuntimeSettings
) -> None:
    for n in range(25):
        jobs.record.schedule(str(n), delay=timedelta(seconds=1))
    clock.advance(timedelta(seconds=1))
    small_batches = replace(settings, activation_batch=10)
    assert Scheduler(storage, clock, small_batches).run_once().activated == 25


def test_one_pass_makes_a_bounded_number_of_storage_calls(
    client: JobClient,
    storage: MemoryStorage,
    clock: FakeClock,
    settings: RuntimeSettings,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(scheduler, "MAX_BATCHES", 2)
    for n in range(25):
        jobs.record.schedule(str(n), delay=timedelta(seconds=1))
    clock.advance(timedelta(seconds=1))
    pass_ = Scheduler(storage, clock, replace(settings, activation_batch=10))
    assert [pass_.run_once().activated for _ in range(3)] == [20, 5, 0]


def test_three_schedulers_racing_fire_each_occurrence_exactly_once(
    client: JobClient, storage: MemoryStorage, clock: FakeClock, settings: RuntimeSettings
) -> None:
    client.upsert_recurring("every-minute", jobs.record, cron="* * * * *", args=["tick"])
    schedulers = [Scheduler(storage, clock, settings) for _ in range(3)]
    rounds = threading.Barrier(len(schedulers) + 1)  # the test moves the clock between rounds
    fired = [0] * len(schedulers)

    def race(index: int) -> None:
        for _ in range(10):
            rounds.wait(TIMEOUT)
            fired[index] += schedulers[index].run_once().fired
            rounds.wait(TIMEOUT)

    threads = [threading.Thread(target=race, args=(i,)) for i in range(len(schedulers))]
    for thread in threads:
        thread.start()
    for _ in range(10):
        clock.advance(timedelta(minutes=1))
        rounds.wait(TIMEOUT)  # all three see the same due occurrence...
        rounds.wait(TIMEOUT)  # ...and race to fire it
    for thread in threads:
        thread.join(TIMEOUT)
    assert sum(fired) == 10
    assert fired_jobs(storage, "every-minute") == [JobState.ENQUEUED] * 10
    definition = storage.get_recurring("every-minute")
    assert definition is not None
    assert definition.last_fire_time == START + timedelta(minutes=10)


def test_missed_occurrences_collapse_into_one_fire_and_the_next_is_computed_from_now(
    client: JobClient, storage: MemoryStorage, clock: FakeClock, settings: RuntimeSettings
) -> None:
    client.upsert_recurring("five", jobs.record, cron="*/5 * * * *", args=["five"])
    clock.advance(timedelta(hours=1, minutes=2))  # twelve occurrences missed
    assert Scheduler(storage, clock, settings).run_once().fired == 1
    definition = storage.get_recurring("five")
    assert definition is not None
    assert definition.last_fire_time == START + timedelta(minutes=5)
    assert definition.next_fire_time == START + timedelta(hours=1, minutes=5)
    assert fired_jobs(storage, "five") == [JobState.ENQUEUED]


def test_a_definition_with_an_unparseable_stored_cron_is_logged_and_skipped(
    client: JobClient,
    storage: MemoryStorage,
    clock: FakeClock,
    settings: RuntimeSettings,
    caplog: pytest.LogCaptureFixture,
) -> None:
    storage.upsert_recurring(
        RecurringRecord(
            id="broken",
            cron="every full moon",
            queue="default",
            invocation=Invocation(target=jobs.record.target, args=("moon",)),
            next_fire_time=START,
            created_at=START,
            updated_at=START,
        )
    )
    client.upsert_recurring("fine", jobs.record, cron="* * * * *", args=["fine"])
    clock.advance(timedelta(minutes=1))
    with caplog.at_level(logging.ERROR):
        assert Scheduler(storage, clock, settings).run_once().fired == 1
    assert "'broken' has an invalid stored cron" in caplog.text
    assert fired_jobs(storage, "fine") == [JobState.ENQUEUED]


def test_the_purge_deletes_only_jobs_finished_longer_ago_than_the_retention(
    client: JobClient, storage: MemoryStorage, clock: FakeClock, settings: RuntimeSettings
) -> None:
    def finish(label: str) -> None:
        jobs.record.enqueue(label)
        (job,) = storage.claim(
            ClaimRequest(
                worker_id="w", queues=frozenset({"default"}), max_count=1, lease=settings.lease
            )
        )
        assert storage.apply(outcomes.succeeded(job, label, clock=clock, config=settings))

    finish("old")
    clock.advance(timedelta(hours=12))
    finish("recent")
    waiting = jobs.record.schedule("waiting", delay=timedelta(days=30))
    old, recent = (
        summary.id
        for summary in reversed(
            storage.query_jobs(JobQuery(states=frozenset({JobState.SUCCEEDED}))).items
        )
    )
    clock.advance(timedelta(hours=12, seconds=1))  # "old" finished a day and a second ago
    assert Scheduler(storage, clock, settings).run_once().purged == 1
    assert storage.get_job(old) is None
    assert stored(storage, recent).state is JobState.SUCCEEDED
    assert stored(storage, waiting).state is JobState.SCHEDULED
    forever = Scheduler(storage, clock, replace(settings, retention=None))
    clock.advance(timedelta(days=2))
    assert forever.run_once().purged == 0


def test_a_pass_without_housekeeping_fires_and_activates_and_leaves_the_rest(
    client: JobClient, storage: MemoryStorage, clock: FakeClock, settings: RuntimeSettings
) -> None:
    jobs.record.enqueue("old")
    request = ClaimRequest(
        worker_id="w", queues=frozenset({"default"}), max_count=1, lease=settings.lease
    )
    (job,) = storage.claim(request)
    assert storage.apply(outcomes.succeeded(job, "old", clock=clock, config=settings))
    client.upsert_recurring("each-minute", jobs.record, cron="* * * * *", args=["tick"])
    scheduled = jobs.record.schedule("later", delay=timedelta(minutes=1))
    late = jobs.record.using(expires=timedelta(seconds=30)).enqueue("late")
    clock.advance(timedelta(days=2))
    pass_ = Scheduler(storage, clock, settings)

    due_work = pass_.run_once(housekeeping=False)

    assert (due_work.fired, due_work.activated) == (1, 1)
    assert (due_work.expired, due_work.purged) == (0, 0)
    assert stored(storage, scheduled).state is JobState.ENQUEUED
    assert stored(storage, late).state is JobState.ENQUEUED  # not claimable, not yet ended
    housekeeping = pass_.run_once()
    assert (housekeeping.fired, housekeeping.expired, housekeeping.purged) == (0, 1, 1)
    assert stored(storage, late).state is JobState.CANCELLED


def test_housekeeping_is_due_at_most_once_per_interval() -> None:
    interval = timedelta(seconds=1)
    assert housekeeping_due(None, START, interval)
    assert not housekeeping_due(START, START, interval)
    assert not housekeeping_due(START, START + interval / 2, interval)
    assert housekeeping_due(START, START + interval, interval)
    assert housekeeping_due(START, START - interval / 2, interval)  # the clock moved back


def test_run_makes_passes_until_asked_to_stop(
    client: JobClient, storage: MemoryStorage, clock: FakeClock, settings: RuntimeSettings
) -> None:
    job_id = jobs.record.schedule("soon", delay=timedelta(seconds=1))
    periodic = Scheduler(storage, clock, settings)
    thread = threading.Thread(target=periodic.run)
    thread.start()
    try:
        clock.advance(timedelta(seconds=1))
        wait_until(lambda: stored(storage, job_id).state is JobState.ENQUEUED, "a later pass")
    finally:
        periodic.request_stop()
        thread.join(TIMEOUT)
    assert not thread.is_alive()


def test_a_failing_step_does_not_stop_the_others(
    client: JobClient,
    storage: MemoryStorage,
    clock: FakeClock,
    settings: RuntimeSettings,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    def unavailable(now: datetime, limit: int) -> int:
        raise ConnectionError("database went away")

    monkeypatch.setattr(storage, "activate_due", unavailable)
    client.upsert_recurring("fine", jobs.record, cron="* * * * *", args=["fine"])
    clock.advance(timedelta(minutes=1))
    assert Scheduler(storage, clock, settings).run_once().fired == 1
    assert "activation step failed" in caplog.text


# -- sleeping until the next due time ----------------------------------------------------

SECOND = timedelta(seconds=1)
MILLISECOND = timedelta(milliseconds=1)


def test_a_pass_reads_the_next_due_job_or_occurrence_and_the_scheduler_sleeps_until_it(
    client: JobClient, storage: MemoryStorage, clock: FakeClock, settings: RuntimeSettings
) -> None:
    client.upsert_recurring("every-minute", jobs.record, cron="* * * * *", args=["tick"])
    jobs.record.schedule("soon", delay=300 * MILLISECOND)
    each_second = Scheduler(storage, clock, replace(settings, scheduler_interval=SECOND))

    first = each_second.run_once()
    assert first.next_due == START + 300 * MILLISECOND
    assert pause(clock.now(), first, SECOND, woken_early=False) == 300 * MILLISECOND

    clock.advance(300 * MILLISECOND)
    woken = each_second.run_once()
    assert (woken.activated, woken.next_due) == (1, START + timedelta(minutes=1))
    assert pause(clock.now(), woken, SECOND, woken_early=True) == SECOND  # a minute away

    clock.set(START + timedelta(minutes=1) - 100 * MILLISECOND)
    before_the_minute = each_second.run_once()
    assert pause(clock.now(), before_the_minute, SECOND, woken_early=False) == 100 * MILLISECOND
    clock.set(START + timedelta(minutes=1))  # the sleep ends when the occurrence is due...
    assert each_second.run_once().fired == 1  # ...and it fires at once, not an interval late
    (fired,) = fired_records(storage, "every-minute")
    assert fired.created_at == START + timedelta(minutes=1)


def test_the_pause_is_until_the_next_due_time_within_the_interval_never_negative() -> None:
    now = START
    due_in = SchedulerPass(next_due=now + 250 * MILLISECOND)
    assert pause(now, SchedulerPass(), SECOND, woken_early=False) == SECOND  # nothing waits
    assert pause(now, SchedulerPass(next_due=FAR_FUTURE), SECOND, woken_early=False) == SECOND
    assert pause(now, due_in, SECOND, woken_early=False) == 250 * MILLISECOND
    assert pause(now + SECOND, due_in, SECOND, woken_early=False) == timedelta(0)  # overdue
    assert pause(now, due_in, 100 * MILLISECOND, woken_early=False) == 100 * MILLISECOND


def test_passes_woken_early_that_find_work_are_at_least_the_shortest_pause_apart() -> None:
    now = START
    soon = now + MILLISECOND
    busy = SchedulerPass(activated=3, next_due=soon)
    fired = SchedulerPass(fired=1, next_due=soon)
    idle = SchedulerPass(next_due=soon)
    assert pause(now, busy, SECOND, woken_early=True) == SHORTEST_PAUSE
    assert pause(now, fired, SECOND, woken_early=True) == SHORTEST_PAUSE
    assert pause(now, busy, SECOND, woken_early=False) == MILLISECOND  # after a full sleep
    assert pause(now, idle, SECOND, woken_early=True) == MILLISECOND  # woke a hair too soon
    assert SHORTEST_PAUSE < SECOND


def test_work_due_at_or_before_the_pass_is_not_its_next_due_time_so_nothing_spins(
    client: JobClient, storage: MemoryStorage, clock: FakeClock, settings: RuntimeSettings
) -> None:
    storage.upsert_recurring(
        RecurringRecord(
            id="broken",
            cron="every full moon",
            queue="default",
            invocation=Invocation(target=jobs.record.target, args=("moon",)),
            next_fire_time=START,
            created_at=START,
            updated_at=START,
        )
    )
    clock.advance(timedelta(minutes=1))
    stuck = Scheduler(storage, clock, settings).run_once()  # the broken cron stays due
    assert (stuck.fired, stuck.next_due) == (0, None)
    assert pause(clock.now(), stuck, SECOND, woken_early=True) == SECOND


def test_a_failed_read_of_the_next_due_time_is_logged_and_the_scheduler_sleeps_an_interval(
    client: JobClient,
    storage: MemoryStorage,
    clock: FakeClock,
    settings: RuntimeSettings,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    def unavailable(after: datetime) -> datetime | None:
        raise ConnectionError("database went away")

    monkeypatch.setattr(storage, "next_due_time", unavailable)
    jobs.record.schedule("soon", delay=SECOND)
    clock.advance(SECOND)
    done = Scheduler(storage, clock, settings).run_once()
    assert (done.activated, done.next_due) == (1, None)
    assert "could not read the next due time" in caplog.text
    assert pause(clock.now(), done, SECOND, woken_early=False) == SECOND


def test_run_wakes_for_a_due_job_long_before_its_interval(
    client: JobClient, storage: MemoryStorage, clock: FakeClock, settings: RuntimeSettings
) -> None:
    passes = threading.Semaphore(0)

    @contextmanager
    def counted() -> Iterator[None]:
        yield
        passes.release()

    job_id = jobs.record.schedule("soon", delay=10 * MILLISECOND)
    hourly = Scheduler(
        storage,
        clock,
        replace(settings, scheduler_interval=timedelta(hours=1)),
        hooks=Hooks(around_turn=counted),
    )
    thread = threading.Thread(target=hourly.run)
    thread.start()
    try:
        assert passes.acquire(timeout=TIMEOUT)  # the first pass, with nothing due yet
        clock.advance(10 * MILLISECOND)
        wait_until(lambda: stored(storage, job_id).state is JobState.ENQUEUED, "a due wake-up")
    finally:
        hourly.request_stop()
        thread.join(TIMEOUT)
    assert not thread.is_alive()


# -- forgetting silent workers -----------------------------------------------------------


def register(storage: MemoryStorage, clock: Clock, worker_id: str) -> WorkerRegistration:
    """A worker's registry row, written now (as its first heartbeat does)."""
    registration = WorkerRegistration(
        storage, clock, worker_id=worker_id, queues=["default"], concurrency=1
    )
    assert registration.beat(0)
    return registration


def registered(storage: MemoryStorage) -> list[str]:
    return [worker.worker_id for worker in storage.list_workers()]


def test_a_worker_silent_for_longer_than_the_worker_retention_is_forgotten_a_live_one_never(
    storage: MemoryStorage, clock: FakeClock, settings: RuntimeSettings
) -> None:
    hourly = replace(settings, worker_retention=timedelta(hours=1))
    scheduler = Scheduler(storage, clock, hourly)
    register(storage, clock, "dead")
    live = register(storage, clock, "live")
    forgotten_at: list[datetime] = []
    while clock.now() < START + timedelta(hours=2):  # a pass and a heartbeat at once
        clock.advance(settings.heartbeat)
        assert live.beat(0)
        if scheduler.run_once().forgotten:
            forgotten_at.append(clock.now())
        assert "live" in registered(storage)
    # "dead" turns stale just after START + 1 h; passes forget at 10 s, 70 s, ... past START
    assert forgotten_at == [START + timedelta(hours=1, seconds=10)]
    assert registered(storage) == ["live"]


def test_workers_are_forgotten_at_most_once_a_minute_of_the_clock(
    storage: MemoryStorage, clock: FakeClock, settings: RuntimeSettings
) -> None:
    scheduler = Scheduler(storage, clock, replace(settings, worker_retention=timedelta(hours=1)))
    register(storage, clock, "first")
    clock.advance(timedelta(seconds=30))
    register(storage, clock, "second")
    clock.advance(timedelta(hours=1))  # "first" silent 1 h 30 s, "second" exactly 1 h
    assert scheduler.run_once().forgotten == 1
    clock.advance(FORGET_WORKERS_EVERY - timedelta(microseconds=1))
    assert scheduler.run_once().forgotten == 0  # "second" is stale, but not a minute yet
    assert registered(storage) == ["second"]
    clock.advance(timedelta(microseconds=1))
    assert scheduler.run_once().forgotten == 1
    assert registered(storage) == []


def test_a_clock_stepped_back_does_not_postpone_forgetting(
    storage: MemoryStorage, clock: FakeClock, settings: RuntimeSettings
) -> None:
    corrected = CorrectedClock(clock, offset=timedelta(hours=1))
    scheduler = Scheduler(
        storage, corrected, replace(settings, worker_retention=timedelta(minutes=5))
    )
    assert scheduler.run_once().forgotten == 0  # at START + 1 h: nothing registered yet
    register(storage, clock, "gone")  # seen at START
    clock.advance(timedelta(minutes=10))
    corrected.set_offset(timedelta(0))  # calibration: this node ran an hour fast
    assert scheduler.run_once().forgotten == 1  # at START + 10 min, before the last forget
    assert registered(storage) == []


def test_a_worker_retention_must_outlast_the_lease_so_no_live_worker_is_forgotten(
    settings: RuntimeSettings,
) -> None:
    with pytest.raises(ValueError, match=r"worker_retention .* must be longer than lease"):
        replace(settings, worker_retention=settings.lease)
    with pytest.raises(ValueError, match="worker_retention must be positive or None"):
        replace(settings, worker_retention=timedelta(0))


def test_no_worker_is_forgotten_without_a_worker_retention_or_a_registry(
    storage: MemoryStorage, clock: FakeClock, settings: RuntimeSettings
) -> None:
    register(storage, clock, "old")
    clock.advance(timedelta(days=365))
    keep_all = Scheduler(storage, clock, replace(settings, worker_retention=None))
    assert keep_all.run_once().forgotten == 0
    assert registered(storage) == ["old"]
    no_registry = Scheduler(object(), clock, settings)  # type: ignore[arg-type]
    assert no_registry.forget_workers(clock.now()) == 0


def test_a_dead_workers_jobs_come_back_by_their_leases_whatever_its_registry_row(
    client: JobClient, storage: MemoryStorage, clock: FakeClock, settings: RuntimeSettings
) -> None:
    def claim(worker_id: str) -> JobRecord:
        (job,) = storage.claim(
            ClaimRequest(
                worker_id=worker_id,
                queues=frozenset({"default"}),
                max_count=1,
                lease=settings.lease,
            )
        )
        return job

    job_id = jobs.record.enqueue("orphan")
    register(storage, clock, "dead")
    assert claim("dead").id == job_id
    clock.advance(settings.lease + timedelta(seconds=1))  # "dead" never renews its lease
    reclaimed = claim("other")
    assert (reclaimed.id, reclaimed.attempt) == (job_id, 2)
    assert registered(storage) == ["dead"]  # recovered while its row still stands
    clock.advance(timedelta(days=1))  # the default worker retention
    assert Scheduler(storage, clock, settings).run_once().forgotten == 1
    job = stored(storage, job_id)
    assert (job.state, job.worker_id, job.attempt) == (JobState.PROCESSING, "other", 2)
