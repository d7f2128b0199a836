"""Statistics: counts per state (zeros included), per queue, and of recurring definitions."""

from __future__ import annotations

from datetime import timedelta
from functools import partial
from uuid import UUID

from millrace_django.clock import FakeClock
from millrace_django.conformance.harness import StoreUnderTest
from millrace_django.conformance.suite import FactGroup
from millrace_django.conformance.support import (
    LEASE,
    claim,
    claim_new,
    claim_one,
    create_instance,
    die,
    enqueue,
    fail,
    job_details,
    make_instance,
    make_job,
    make_recurring,
    race,
    state_of,
    stored_instance,
    succeed,
    with_fields,
)
from millrace_django.contract import (
    MAX_PAGE_SIZE,
    FireOutcome,
    InstanceQuery,
    InstanceState,
    JobQuery,
    JobState,
    JobStatistics,
    JobSummary,
    OverlapPolicy,
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

    def test_a_definition_held_by_overlap_queue_is_not_counted_overdue(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Statistics count a due definition that overlap ``queue`` holds back (its last
        job still active) as waiting, not overdue; once that job ends it is overdue."""
        record = make_recurring(clock, "held", overlap=OverlapPolicy.QUEUE)
        store.jobs.upsert_recurring(record)
        job = make_job(clock, queue="held", recurring_id="held")
        following = record.next_fire_time + timedelta(days=1)
        fired = store.jobs.try_fire_recurring("held", record.next_fire_time, following, job)
        assert fired is FireOutcome.FIRED
        clock.set(following)

        stats = store.monitoring.get_statistics(TenantFilter.any())
        assert (stats.recurring_definitions, stats.overdue_recurring_definitions) == (1, 0)
        assert store.jobs.try_cancel(job.id)
        stats = store.monitoring.get_statistics(TenantFilter.any())
        assert (stats.recurring_definitions, stats.overdue_recurring_definitions) == (1, 1)


def _listed_jobs(store: StoreUnderTest, tenant: TenantFilter) -> dict[JobState, int]:
    """The truth the counts must match: the jobs listed in each state (few here)."""
    listed = dict.fromkeys(JobState, 0)
    for state in JobState:
        query = JobQuery(states=frozenset({state}), tenant=tenant, limit=MAX_PAGE_SIZE)
        listed[state] = len(store.monitoring.query_jobs(query).items)
    return listed


def _listed_instances(store: StoreUnderTest) -> dict[InstanceState, int]:
    listed = dict.fromkeys(InstanceState, 0)
    for state in InstanceState:
        query = InstanceQuery(states=frozenset({state}), limit=MAX_PAGE_SIZE)
        listed[state] = len(store.monitoring.query_instances(query).items)
    return listed


def _assert_counts_match_the_lists(store: StoreUnderTest, step: str) -> None:
    for tenant in (TenantFilter.any(), TenantFilter.of("acme"), TenantFilter.untenanted()):
        stats = store.monitoring.get_statistics(tenant)
        assert dict(stats.jobs_by_state) == _listed_jobs(store, tenant), (step, tenant)
    stats = store.monitoring.get_statistics(TenantFilter.any())
    assert dict(stats.instances_by_state) == _listed_instances(store), step


class MaintainedCountFacts(FactGroup):
    heading = "Counts of finished jobs"

    def test_counts_follow_every_way_a_job_ends_and_every_way_a_finished_job_goes(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """The counts follow every way a job ends (acknowledged in a batch or alone,
        dead with its continuations cancelled, cancelled waiting or with its workflow,
        stored cancelled after its parent died) and every way a finished job goes
        (purged, deleted), per tenant too."""
        for tenant in ("acme", None, "acme"):
            enqueue(store, clock, queue="batch", tenant_id=tenant)
        batch = claim(store, "w1", queues=["batch"], max_count=3)
        assert store.jobs.apply_many([succeed(job, clock) for job in batch]) == [True] * 3
        _assert_counts_match_the_lists(store, "acknowledged in a batch")
        alone = claim_new(store, clock, "alone", tenant_id="acme")
        assert store.jobs.apply(succeed(alone, clock, result={"ok": 1}))
        parent = claim_new(store, clock, "parents")
        (child,) = store.jobs.enqueue(
            [make_job(clock, state=JobState.AWAITING, parent_id=parent.id)]
        )
        assert store.jobs.apply(die(parent, clock))
        assert state_of(store, child) is JobState.CANCELLED
        _assert_counts_match_the_lists(store, "dead, continuation cancelled")
        (late,) = store.jobs.enqueue(
            [make_job(clock, state=JobState.AWAITING, parent_id=parent.id, tenant_id="acme")]
        )
        assert state_of(store, late) is JobState.CANCELLED
        assert store.jobs.try_cancel(enqueue(store, clock, tenant_id="acme"))
        _assert_counts_match_the_lists(store, "cancelled waiting, stored cancelled")
        instance = make_instance(clock)
        owned = make_job(clock, workflow_instance_id=instance.id, activity_node_id="a")
        store.workflows.create_instance(instance, enqueue=[owned])
        assert store.workflows.cancel_instance(instance.id)
        assert state_of(store, owned.id) is JobState.CANCELLED
        _assert_counts_match_the_lists(store, "cancelled with its workflow")
        clock.advance(timedelta(minutes=1))
        assert store.jobs.purge_finished(clock.now(), 2) == 2
        _assert_counts_match_the_lists(store, "purged")
        assert store.jobs.delete_job(alone.id)
        assert not store.jobs.delete_job(alone.id)
        _assert_counts_match_the_lists(store, "deleted")
        assert store.jobs.purge_finished(clock.now(), 100) > 0
        _assert_counts_match_the_lists(store, "all purged")

    def test_counts_follow_instances_as_they_end_and_as_a_finished_one_is_rewritten(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """The counts follow instances as they end (checkpointed finished, cancelled) and
        as a finished instance is rewritten, in another finished state or unfinished."""
        done = create_instance(store, clock)
        store.workflows.update_instance(with_fields(done, state=InstanceState.COMPLETED), 1)
        failing = create_instance(store, clock, tenant_id="acme")
        store.workflows.update_instance(with_fields(failing, state=InstanceState.FAILED), 1)
        _assert_counts_match_the_lists(store, "ended")
        failed = stored_instance(store, failing.id)
        compensated = with_fields(failed, state=InstanceState.COMPENSATED)
        store.workflows.update_instance(compensated, failed.revision)
        assert store.workflows.cancel_instance(create_instance(store, clock).id)
        create_instance(store, clock)
        _assert_counts_match_the_lists(store, "rewritten, cancelled")
        stats = store.monitoring.get_statistics(TenantFilter.any())
        assert dict(stats.instances_by_state) == _instances_by_state(
            completed=1, compensated=1, cancelled=1, running=1
        )
        reopened = stored_instance(store, done.id)
        store.workflows.update_instance(
            with_fields(reopened, state=InstanceState.SUSPENDED), reopened.revision
        )
        _assert_counts_match_the_lists(store, "a finished instance rewritten unfinished")

    def test_folding_keeps_every_count_and_leaves_nothing_to_fold_a_second_time(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Folding keeps every count, per tenant too, and leaves nothing to fold a second
        time."""
        for round_ in range(3):
            for tenant in ("acme", None):
                enqueue(store, clock, queue=f"q{round_ % 2}", tenant_id=tenant)
            jobs = claim(store, "w1", queues=["q0", "q1"], max_count=2)
            store.jobs.apply_many([succeed(job, clock) for job in jobs])
            assert store.jobs.try_cancel(enqueue(store, clock, tenant_id="acme"))
        before = {t: store.monitoring.get_statistics(t) for t in _TENANTS}
        assert store.monitoring.fold_statistics(1000) >= 0
        assert {t: store.monitoring.get_statistics(t) for t in _TENANTS} == before
        assert store.monitoring.fold_statistics(1000) == 0
        _assert_counts_match_the_lists(store, "folded")

    def test_racing_acknowledgements_purges_and_folds_never_lose_or_double_a_count(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Racing acknowledgements, purges and folds never lose or double a count (8
        racers, each several times)."""
        per_worker = 5
        for worker in range(4):
            for _ in range(per_worker):
                enqueue(store, clock, queue=f"w{worker}", tenant_id="acme" if worker % 2 else None)

        def acknowledge(worker: int) -> int:
            done = 0
            for _ in range(per_worker):
                (job,) = claim(store, f"w{worker}", queues=[f"w{worker}"])
                (outcome,) = store.jobs.apply_many([succeed(job, clock)])
                done += outcome is True
            return done

        later = clock.now() + timedelta(seconds=1)

        def purge() -> int:
            return sum(store.jobs.purge_finished(later, 2) for _ in range(per_worker))

        def fold() -> int:
            return sum(store.monitoring.fold_statistics(3) for _ in range(per_worker))

        for _ in range(4):  # something to purge whatever the racers' order
            enqueue(store, clock, queue="done")
        store.jobs.apply_many(
            [succeed(j, clock) for j in claim(store, queues=["done"], max_count=4)]
        )
        racers = [partial(acknowledge, w) for w in range(4)] + [purge, purge, fold, fold]
        results = race(store, racers)
        assert sum(results[:4]) == 4 * per_worker
        assert sum(results[4:6]) > 0
        _assert_counts_match_the_lists(store, "after the race")
        store.monitoring.fold_statistics(1000)
        _assert_counts_match_the_lists(store, "folded after the race")


_TENANTS = (TenantFilter.any(), TenantFilter.of("acme"), TenantFilter.untenanted())
