"""Flow-control limits: what a claim may start when jobs carry concurrency and rate limits."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from functools import partial
from typing import ClassVar
from uuid import UUID

import pytest

from millrace_django.clock import FakeClock
from millrace_django.conformance.harness import StoreUnderTest
from millrace_django.conformance.suite import FactGroup
from millrace_django.conformance.support import (
    LEASE,
    claim,
    die,
    enqueue,
    fail,
    give_back,
    make_job,
    race,
    release,
    stored_job,
    succeed,
    transition,
)
from millrace_django.contract import (
    MAX_RATE_PERIOD,
    JobRecord,
    JobState,
    JobTransition,
    Limit,
    LimitUsage,
    Rate,
)

SCOPE = "job:conformance.dummy:run"
HELD_BACK = 20
RATE = Rate(50, timedelta(seconds=1))
RATE_STEP = timedelta(milliseconds=100)
RATE_STEPS = 30


def _limited(
    concurrency: int | None = None, rate: Rate | None = None, scope: str = SCOPE
) -> tuple[Limit, ...]:
    return (Limit(scope=scope, concurrency=concurrency, rate=rate),)


def _processing(store: StoreUnderTest, ids: list[UUID]) -> int:
    return sum(stored_job(store, job_id).state is JobState.PROCESSING for job_id in ids)


def _started(job: JobRecord) -> datetime:
    """When a claim started ``job``: its lease's start."""
    assert job.lease_until is not None
    return job.lease_until - LEASE


class _Peak:
    """The most jobs racers held at once: counted up after a claim returns and down
    before its job's end is applied, so never more than the storage had processing."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held = 0
        self.highest = 0

    def add(self, n: int) -> None:
        with self._lock:
            self._held += n
            self.highest = max(self.highest, self._held)


def _drain(store: StoreUnderTest, clock: FakeClock, worker: str, peak: _Peak) -> int:
    """Claim and finish jobs until a claim and the next one come back empty (another
    racer may have been holding the last slot); how many this racer ran."""
    ran = empty = 0
    while empty < 50:
        taken = claim(store, worker, max_count=3)
        peak.add(len(taken))
        empty = 0 if taken else empty + 1
        for job in taken:
            peak.add(-1)
            assert store.jobs.apply(succeed(job, clock))
            ran += 1
    return ran


_EXITS: dict[str, Callable[[JobRecord, FakeClock], JobTransition]] = {
    "success": lambda job, clock: succeed(job, clock),
    "failure awaiting a retry": lambda job, clock: fail(job, clock, retry_in=timedelta(hours=1)),
    "dead, the poison-pill verdict's transition too": lambda job, clock: die(job, clock),
    "cancellation": lambda job, clock: transition(
        job, JobState.CANCELLED, finished_at=clock.now(), error="cancelled by request"
    ),
    "release (an interruption)": lambda job, clock: release(job),
    "give-back (never started)": lambda job, clock: give_back(job),
}


class LimitFacts(FactGroup):
    heading: ClassVar[str] = "Flow-control limits"

    @pytest.mark.parametrize("limit", [1, 2, 5])
    def test_racing_claimers_never_start_more_than_the_concurrency_limit(
        self, store: StoreUnderTest, clock: FakeClock, limit: int
    ) -> None:
        """Racers never hold more jobs of a scope than its limit of 1, 2 or 5.

        They race for 20 jobs at once (at most the limit start, a lone claimer then fills
        it exactly), then drain the rest, never holding more than the limit together."""
        racers = self.contention.racers
        ids = store.jobs.enqueue(
            [make_job(clock, limits=_limited(limit)) for _ in range(HELD_BACK)]
        )
        first = race(store, [partial(claim, store, f"w{n}", max_count=3) for n in range(racers)])
        started = [job for taken in first for job in taken]
        assert 1 <= len(started) <= limit, f"{len(started)} started under a limit of {limit}"
        started += claim(store, "lone", max_count=HELD_BACK)
        assert len(started) == limit
        assert _processing(store, ids) == limit
        for job in started:
            assert store.jobs.apply(succeed(job, clock))

        peak = _Peak()
        drained = race(store, [partial(_drain, store, clock, f"w{n}", peak) for n in range(racers)])
        assert sum(drained) == HELD_BACK - limit
        assert peak.highest <= limit, f"{peak.highest} ran at once under a limit of {limit}"

    def test_racing_claimers_never_exceed_a_rate_in_any_window(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """No one-second window holds more than 50 starts under a rate of 50/s.

        The racers claim every 0.1 s for 3 s of the clock; the rate is used, too (at least
        50 starts a second)."""
        racers = self.contention.racers
        store.jobs.enqueue([make_job(clock, limits=_limited(rate=RATE)) for _ in range(400)])
        starts: list[datetime] = []
        workers = [f"w{n}" for n in range(racers)]
        for _ in range(RATE_STEPS):
            per_worker = race(store, [partial(claim, store, w, max_count=7) for w in workers])
            starts += [_started(job) for taken in per_worker for job in taken]
            clock.advance(RATE_STEP)

        starts.sort()
        for end in starts:
            in_window = sum(1 for at in starts if end - RATE.period < at <= end)
            assert in_window <= RATE.count, f"{in_window} starts in the second up to {end}"
        assert len(starts) >= RATE.count * 3

    @pytest.mark.parametrize("exit_path", list(_EXITS))
    def test_every_exit_from_processing_frees_the_slot(
        self, store: StoreUnderTest, clock: FakeClock, exit_path: str
    ) -> None:
        """Each way out of processing frees the slot for the next job.

        With a limit of 1, a second job waits while the first runs, and one job starts
        once the first leaves by success, failure, death, cancellation, release or
        give-back."""
        first = enqueue(store, clock, limits=_limited(1))
        second = enqueue(store, clock, limits=_limited(1))
        (job,) = claim(store, "w1", max_count=2)
        assert job.id == first
        assert claim(store, "w2", max_count=2) == []

        assert store.jobs.apply(_EXITS[exit_path](job, clock))

        taken = claim(store, "w2", max_count=2)
        assert len(taken) == 1, f"{len(taken)} started after the running job left"
        assert _processing(store, [first, second]) == 1

    def test_an_expired_lease_keeps_its_slot_until_reclaimed(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """A job whose lease expired keeps its slot: a claim takes it over, starts no other.

        With a limit of 1, its worker may still be running it."""
        first = enqueue(store, clock, limits=_limited(1))
        second = enqueue(store, clock, limits=_limited(1))
        (job,) = claim(store, "w1", max_count=2)
        clock.advance(LEASE + timedelta(seconds=1))

        taken = claim(store, "w2", max_count=2)

        assert [job.id for job in taken] == [first]
        assert stored_job(store, second).state is JobState.ENQUEUED
        assert not store.jobs.apply(succeed(job, clock)), "the old lease's fence held"
        assert store.jobs.apply(succeed(taken[0], clock))
        assert [job.id for job in claim(store, "w3", max_count=2)] == [second]

    def test_scopes_are_limited_independently(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """A limit of 1 per key: one job of each key runs at once, never two of one."""
        for key in ("a", "a", "b", "b"):
            enqueue(store, clock, limits=_limited(1, scope=f"{SCOPE}#{key}"))

        taken = claim(store, "w1", max_count=10)

        assert sorted(job.limits[0].scope for job in taken) == [f"{SCOPE}#a", f"{SCOPE}#b"]
        assert claim(store, "w2", max_count=10) == []

    def test_a_keys_backlog_never_holds_back_another_keys_jobs(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """One key's long backlog held back by its limit does not hold back another key.

        300 jobs of one key under a limit of 1 per key, then one job of another key: one
        claim starts a job of each."""
        store.jobs.enqueue(
            [make_job(clock, limits=_limited(1, scope=f"{SCOPE}#busy")) for _ in range(300)]
        )
        other = enqueue(store, clock, limits=_limited(1, scope=f"{SCOPE}#other"))
        (first,) = claim(store, "w1", max_count=1)
        assert first.limits[0].scope == f"{SCOPE}#busy"

        taken = claim(store, "w2", max_count=5)

        assert [job.id for job in taken] == [other]

    def test_idle_limit_scopes_are_forgotten_and_started_afresh(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """A scope without a start for longer than any rate's period is forgotten.

        Under a rate of 2 a day, two jobs start, a third waits; nothing is forgotten
        while the day lasts; after it, the scope is forgotten and the next two start."""
        daily = _limited(rate=Rate(2, MAX_RATE_PERIOD))
        store.jobs.enqueue([make_job(clock, limits=daily) for _ in range(4)])
        assert len(claim(store, "w1", max_count=5)) == 2
        assert store.jobs.forget_idle_limits(clock.now() - MAX_RATE_PERIOD, 10) == 0
        clock.advance(MAX_RATE_PERIOD - timedelta(seconds=1))
        assert claim(store, "w1", max_count=5) == []
        assert store.jobs.forget_idle_limits(clock.now() - MAX_RATE_PERIOD, 10) == 0

        clock.advance(timedelta(seconds=2))
        assert store.jobs.forget_idle_limits(clock.now() - MAX_RATE_PERIOD, 10) == 1

        assert len(claim(store, "w1", max_count=5)) == 2

    def test_forgetting_scopes_while_claimers_race_never_exceeds_a_limit(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Scopes forgotten again and again while racers drain never let a limit slip.

        Two of the racers forget every scope (a concurrency limit keeps nothing to lose)
        while the others drain 20 jobs under a limit of 1: never two at once."""
        racers = self.contention.racers
        store.jobs.enqueue([make_job(clock, limits=_limited(1)) for _ in range(HELD_BACK)])
        peak = _Peak()
        later = clock.now() + MAX_RATE_PERIOD

        def forget() -> int:
            return sum(store.jobs.forget_idle_limits(later, 10) for _ in range(100))

        drainers: list[Callable[[], int]] = [
            partial(_drain, store, clock, f"w{n}", peak) for n in range(racers - 2)
        ]
        done = race(store, [*drainers, forget, forget])

        assert sum(done[: racers - 2]) == HELD_BACK
        assert peak.highest == 1

    def test_a_job_starts_only_within_every_limit_it_carries(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """A job starts only while every limit it carries has room.

        Under a queue limit of 3 and a function limit of 1: one job of the function runs,
        and jobs of other functions fill the queue."""
        queue_limit = Limit(scope="queue:default", concurrency=3)
        for _ in range(3):
            enqueue(store, clock, limits=(queue_limit, *_limited(1)))
        for n in range(3):
            enqueue(store, clock, limits=(queue_limit, *_limited(1, scope=f"job:other{n}")))

        taken = claim(store, "w1", max_count=10)

        assert len(taken) == 3
        assert sum(1 for job in taken if job.limits[1].scope == SCOPE) == 1
        assert claim(store, "w2", max_count=10) == []

    def test_held_back_jobs_never_hold_back_jobs_without_limits(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Jobs held back by a limit never hold back the jobs without limits behind them."""
        limited = [enqueue(store, clock, priority=5, limits=_limited(1)) for _ in range(10)]
        plain = [enqueue(store, clock) for _ in range(5)]

        taken = claim(store, "w1", max_count=20)

        assert {job.id for job in taken} == {limited[0], *plain}

    def test_a_paused_queue_starts_no_limited_job(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Pausing a queue holds its limited jobs too; resuming lets them start."""
        job_id = enqueue(store, clock, limits=_limited(1))
        store.jobs.pause_queue("default")
        assert claim(store, "w1") == []
        store.jobs.resume_queue("default")
        assert [job.id for job in claim(store, "w1")] == [job_id]

    def test_limits_round_trip_through_enqueue_get_and_claim(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """The limits a job carries are stored, read back and claimed unchanged."""
        limits = (
            Limit(scope="queue:default", concurrency=4),
            Limit(scope=f"{SCOPE}#customer-7", concurrency=1, rate=Rate(600, timedelta(minutes=1))),
        )
        job_id = enqueue(store, clock, limits=limits)

        assert stored_job(store, job_id).limits == limits
        (job,) = claim(store, "w1")
        assert job.limits == limits
        assert job == stored_job(store, job_id)

    def test_limit_usage_counts_running_and_waiting_jobs_per_queue_and_function(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Limit usage gives per queue and function the limit and its running and waiting jobs.

        A function keyed by an argument is one entry, its active keys counted; a finished
        job no longer counts, a job without limits never."""
        queue_limit = Limit(scope="queue:default", concurrency=5)
        for key in ("a", "a", "b"):
            enqueue(store, clock, limits=(queue_limit, *_limited(1, scope=f"{SCOPE}#{key}")))
        enqueue(store, clock)
        taken = claim(store, "w1", max_count=10)
        assert len(taken) == 3  # one per key, and the job without limits

        def usage(running: int, waiting: int, keys: int) -> list[LimitUsage]:
            return [
                LimitUsage(
                    scope=SCOPE, concurrency=1, rate=None, running=running, waiting=waiting,
                    keys=keys,
                ),
                LimitUsage(
                    scope="queue:default", concurrency=5, rate=None, running=running,
                    waiting=waiting,
                ),
            ]  # fmt: skip

        assert store.monitoring.get_limit_usage() == usage(running=2, waiting=1, keys=2)
        for job in taken:
            assert store.jobs.apply(succeed(job, clock))
        assert store.monitoring.get_limit_usage() == usage(running=0, waiting=1, keys=1)
