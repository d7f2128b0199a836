"""Statistics: counts per state (zeros included), per queue, and of recurring definitions."""

from __future__ import annotations

from datetime import timedelta
from uuid import UUID

from millrace_django.clock import FakeClock
from millrace_django.conformance.harness import StoreUnderTest
from millrace_django.conformance.suite import FactGroup
from millrace_django.conformance.support import (
    LEASE,
    claim,
    claim_one,
    enqueue,
    fail,
    job_details,
    make_instance,
    make_recurring,
)
from millrace_django.contract import (
    InstanceState,
    JobQuery,
    JobState,
    JobStatistics,
    JobSummary,
    RetryKind,
    RetrySpec,
    TenantFilter,
)


def _summary(store: StoreUnderTest, job_id: UUID) -> JobSummary:
    (summary,) = [s for s in store.monitoring.query_jobs(JobQuery()).items if s.id == job_id]
    assert job_details(store, job_id).summary == summary
    return summary


def _jobs_by_state(**counts: int) -> dict[JobState, int]:
    expected = dict.fromkeys(JobState, 0)
    expected.update({JobState(name.lower()): n for name, n in counts.items()})
    return expected


def _instances_by_state(**counts: int) -> dict[InstanceState, int]:
    expected = dict.fromkeys(InstanceState, 0)
    expected.update({InstanceState(name.lower()): n for name, n in counts.items()})
    return expected


def _non_zero(counts: JobStatistics) -> dict[str, int]:
    return {queue: n for queue, n in counts.enqueued_by_queue.items() if n}


class StatisticsFacts(FactGroup):
    heading = "Statistics"

    def test_interruptions_separate_infrastructure_churn_from_recorded_failures(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Interruptions separate infrastructure churn from recorded failures."""
        job_id = enqueue(store, clock, retry=RetrySpec(kind=RetryKind.FIXED, max_attempts=9))
        claim_one(store, "w1")
        clock.advance(LEASE + timedelta(seconds=1))
        claim_one(store, "w2")
        clock.advance(LEASE + timedelta(seconds=1))
        summary = _summary(store, job_id)  # the second lease ran out; not yet reclaimed
        assert (summary.attempt, summary.failures, summary.interruptions) == (2, 0, 1)
        third = claim_one(store, "w3")
        assert store.jobs.apply(fail(third, clock, retry_in=timedelta(seconds=1)))
        summary = _summary(store, job_id)
        assert (summary.attempt, summary.failures, summary.interruptions) == (3, 1, 2)

    def test_statistics_report_every_state_including_zeroes(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Statistics report every state, including zeroes."""
        empty = store.monitoring.get_statistics(TenantFilter.any())
        assert dict(empty.jobs_by_state) == _jobs_by_state()
        assert dict(empty.instances_by_state) == _instances_by_state()
        assert _non_zero(empty) == {}
        assert (empty.recurring_definitions, empty.overdue_recurring_definitions) == (0, 0)
        enqueue(store, clock)
        enqueue(store, clock)
        enqueue(store, clock, queue="mail")
        assert store.jobs.try_cancel(enqueue(store, clock))
        enqueue(store, clock, queue="busy")
        claim_one(store, queues=["busy"])
        store.workflows.create_instance(make_instance(clock))
        stats = store.monitoring.get_statistics(TenantFilter.any())
        assert set(stats.jobs_by_state) == set(JobState)
        assert dict(stats.jobs_by_state) == _jobs_by_state(enqueued=3, cancelled=1, processing=1)
        assert _non_zero(stats) == {"default": 2, "mail": 1}
        assert set(stats.instances_by_state) == set(InstanceState)
        assert dict(stats.instances_by_state) == _instances_by_state(running=1)

    def test_statistics_give_the_creation_time_of_the_oldest_enqueued_job_per_queue(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Statistics give the creation time of the oldest enqueued job per queue (the
        backlog's age; jobs running or finished do not count)."""
        first = clock.now()
        enqueue(store, clock)
        clock.advance(timedelta(seconds=5))
        enqueue(store, clock)
        enqueue(store, clock, queue="mail")
        assert store.jobs.try_cancel(enqueue(store, clock, queue="idle"))
        stats = store.monitoring.get_statistics(TenantFilter.any())
        assert dict(stats.oldest_enqueued_by_queue) == {"default": first, "mail": clock.now()}
        claim_one(store, queues=["mail"])
        claimed = claim(store, "w2", queues=["default"], max_count=1)
        assert [job.created_at for job in claimed] == [first]
        stats = store.monitoring.get_statistics(TenantFilter.any())
        assert dict(stats.oldest_enqueued_by_queue) == {"default": clock.now()}

    def test_statistics_respect_the_tenant_filter(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Statistics respect the tenant filter (jobs, queues and instances)."""
        for tenant in ("acme", None, "acme", "globex", None, "acme"):
            enqueue(store, clock, tenant_id=tenant)
        assert store.jobs.try_cancel(enqueue(store, clock, tenant_id="acme"))
        for tenant in ("acme", None, None):
            store.workflows.create_instance(make_instance(clock, tenant_id=tenant))
        expected = {
            TenantFilter.any(): (6, 1, 3),
            TenantFilter.of("acme"): (3, 1, 1),
            TenantFilter.untenanted(): (2, 0, 2),
            TenantFilter.of("initech"): (0, 0, 0),
        }
        for tenant_filter, (enqueued, cancelled, instances) in expected.items():
            stats = store.monitoring.get_statistics(tenant_filter)
            assert dict(stats.jobs_by_state) == _jobs_by_state(
                enqueued=enqueued, cancelled=cancelled
            ), tenant_filter
            assert _non_zero(stats) == ({"default": enqueued} if enqueued else {}), tenant_filter
            assert dict(stats.instances_by_state) == _instances_by_state(running=instances)

    def test_statistics_count_recurring_definitions_and_overdue_ones(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Statistics count recurring definitions and the overdue ones (due time inclusive)."""
        soon = clock.now() + timedelta(minutes=5)
        store.jobs.upsert_recurring(make_recurring(clock, "soon", next_fire_time=soon))
        store.jobs.upsert_recurring(
            make_recurring(clock, "later", next_fire_time=clock.now() + timedelta(hours=2))
        )
        stats = store.monitoring.get_statistics(TenantFilter.any())
        assert (stats.recurring_definitions, stats.overdue_recurring_definitions) == (2, 0)
        clock.set(soon)
        stats = store.monitoring.get_statistics(TenantFilter.any())
        assert (stats.recurring_definitions, stats.overdue_recurring_definitions) == (2, 1)
        clock.advance(timedelta(hours=3))
        stats = store.monitoring.get_statistics(TenantFilter.any())
        assert (stats.recurring_definitions, stats.overdue_recurring_definitions) == (2, 2)
        assert store.jobs.remove_recurring("soon")
        stats = store.monitoring.get_statistics(TenantFilter.any())
        assert (stats.recurring_definitions, stats.overdue_recurring_definitions) == (1, 1)
