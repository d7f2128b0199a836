"""Per-minute throughput and the jobs list's target search."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import ClassVar
from uuid import UUID

from millrace_django.clock import FakeClock
from millrace_django.conformance.harness import StoreUnderTest
from millrace_django.conformance.suite import FactGroup
from millrace_django.conformance.support import (
    claim,
    enqueue,
    ids_of,
    job_in_state,
    transition,
)
from millrace_django.contract import (
    THROUGHPUT_MINUTES_CAP,
    Invocation,
    JobQuery,
    JobState,
    ThroughputPoint,
)


def _start(clock: FakeClock) -> datetime:
    """A whole UTC minute ahead of the clock."""
    return clock.now().astimezone(UTC).replace(second=0, microsecond=0) + timedelta(hours=1)


def _at(
    store: StoreUnderTest, clock: FakeClock, start: datetime, seconds: int, state: JobState
) -> None:
    """A job brought to ``state`` at ``start + seconds`` (the clock moves forward)."""
    clock.set(start + timedelta(seconds=seconds))
    job_in_state(store, clock, state)


class ThroughputFacts(FactGroup):
    heading: ClassVar[str] = "Throughput"

    def test_finished_jobs_are_counted_per_minute_with_zeros(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """One point per minute of [floor(since), floor(until)), oldest first: succeeded
        and dead jobs by finished_at; cancelled and active jobs are not counted."""
        start = _start(clock)
        _at(store, clock, start, 0, JobState.SUCCEEDED)
        _at(store, clock, start, 30, JobState.DEAD)
        _at(store, clock, start, 59, JobState.SUCCEEDED)
        _at(store, clock, start, 121, JobState.SUCCEEDED)
        _at(store, clock, start, 122, JobState.CANCELLED)
        _at(store, clock, start, 123, JobState.FAILED)
        _at(store, clock, start, 124, JobState.PROCESSING)
        _at(store, clock, start, 180, JobState.DEAD)  # at floor(until): outside

        points = store.monitoring.get_throughput(
            start + timedelta(seconds=40), start + timedelta(minutes=3, seconds=20)
        )

        assert points == [
            ThroughputPoint(minute=start, succeeded=2, failed=1),
            ThroughputPoint(minute=start + timedelta(minutes=1), succeeded=0, failed=0),
            ThroughputPoint(minute=start + timedelta(minutes=2), succeeded=1, failed=0),
        ]

    def test_successes_acknowledged_together_are_counted_and_purging_them_uncounts_them(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Successes acknowledged together (the hot path) are counted in the minute each
        finished in, and purging them takes them off again."""
        start = _start(clock)
        clock.set(start)
        for _ in range(3):
            enqueue(store, clock, queue="together")
        jobs = claim(store, queues=["together"], max_count=3)
        finished = [start + timedelta(seconds=s) for s in (5, 50, 70)]
        acknowledged = store.jobs.apply_many(
            [
                transition(job, JobState.SUCCEEDED, finished_at=at)
                for job, at in zip(jobs, finished, strict=True)
            ]
        )
        assert acknowledged == [True] * 3
        window = (start, start + timedelta(minutes=2))

        assert store.monitoring.get_throughput(*window) == [
            ThroughputPoint(minute=start, succeeded=2, failed=0),
            ThroughputPoint(minute=start + timedelta(minutes=1), succeeded=1, failed=0),
        ]
        assert store.jobs.purge_finished(start + timedelta(minutes=5), 10) == 3
        assert [(p.succeeded, p.failed) for p in store.monitoring.get_throughput(*window)] == [
            (0, 0),
            (0, 0),
        ]

    def test_an_empty_or_inverted_window_has_no_points(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """since and until in the same minute, or until before since: no points."""
        start = _start(clock)
        _at(store, clock, start, 10, JobState.SUCCEEDED)

        assert store.monitoring.get_throughput(start, start + timedelta(seconds=59)) == []
        assert store.monitoring.get_throughput(start + timedelta(minutes=5), start) == []

    def test_a_window_wider_than_the_cap_keeps_its_newest_minutes(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """At most THROUGHPUT_MINUTES_CAP points, the newest; older jobs are not counted."""
        start = _start(clock)
        _at(store, clock, start, 0, JobState.SUCCEEDED)
        _at(store, clock, start, 600, JobState.SUCCEEDED)
        until = start + timedelta(minutes=THROUGHPUT_MINUTES_CAP + 5)

        points = store.monitoring.get_throughput(start - timedelta(days=3), until)

        assert len(points) == THROUGHPUT_MINUTES_CAP
        assert points[0].minute == start + timedelta(minutes=5)
        assert points[-1].minute == until - timedelta(minutes=1)
        assert sum(p.succeeded for p in points) == 1

    def test_purged_jobs_are_no_longer_counted(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Throughput counts the stored jobs only."""
        start = _start(clock)
        _at(store, clock, start, 5, JobState.SUCCEEDED)
        assert store.jobs.purge_finished(start + timedelta(minutes=1), 10) == 1

        (point,) = store.monitoring.get_throughput(start, start + timedelta(minutes=1))
        assert (point.succeeded, point.failed) == (0, 0)


class TargetSearchFacts(FactGroup):
    heading: ClassVar[str] = "Target search"

    def test_target_contains_filters_case_insensitively(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """target_contains keeps jobs whose target holds the text in any letter case;
        a blank text filters nothing."""
        mail = enqueue(store, clock, invocation=Invocation(target="app.tasks:Send_Mail"))
        other = enqueue(store, clock, invocation=Invocation(target="app.tasks:resize"))

        found = store.monitoring.query_jobs(JobQuery(target_contains="SEND_m"))
        assert ids_of(found) == [mail]
        everything = store.monitoring.query_jobs(JobQuery(target_contains="  "))
        assert sorted(ids_of(everything)) == sorted([mail, other])
        assert ids_of(store.monitoring.query_jobs(JobQuery(target_contains="nowhere"))) == []

    def test_target_prefix_filters_by_the_start_of_the_target_in_its_letter_case(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """target_prefix keeps jobs whose target starts with the text, letter case
        included (a whole target is its own prefix); an empty text filters nothing."""
        mail = enqueue(store, clock, invocation=Invocation(target="app.tasks:Send_Mail"))
        other = enqueue(store, clock, invocation=Invocation(target="app.tasks:resize"))
        elsewhere = enqueue(store, clock, invocation=Invocation(target="lib.app.tasks:x"))
        lower = job_in_state(
            store, clock, JobState.SUCCEEDED, invocation=Invocation(target="app.tasks:send_mail")
        )
        done = job_in_state(
            store, clock, JobState.SUCCEEDED, invocation=Invocation(target="app.tasks:resize")
        )

        def found(prefix: str) -> list[UUID]:
            return sorted(ids_of(store.monitoring.query_jobs(JobQuery(target_prefix=prefix))))

        assert found("app.tasks:") == sorted([mail, other, lower, done])
        assert found("app.tasks:Send_Mail") == [mail]
        assert found("app.tasks:send") == [lower]
        assert found("app.tasks;") == []
        assert found("") == sorted([mail, other, elsewhere, lower, done])
