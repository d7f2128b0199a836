"""The job catalog: figures per job function."""

from __future__ import annotations

from datetime import timedelta
from functools import partial
from typing import Any, ClassVar
from uuid import UUID

from millrace_django.clock import FakeClock
from millrace_django.conformance.harness import StoreUnderTest
from millrace_django.conformance.suite import FactGroup
from millrace_django.conformance.support import (
    claim,
    claim_one,
    die,
    enqueue,
    fail,
    job_in_state,
    make_job,
    race,
    stored_job,
    succeed,
)
from millrace_django.contract import (
    RUN_TIME_WINDOW,
    CatalogEntry,
    Invocation,
    JobState,
    JobTransition,
    TenantFilter,
    catalog_total,
)

ALPHA = "catalog.jobs:alpha"
BETA = "catalog.jobs:beta"
GAMMA = "catalog.jobs:gamma"


def _job(
    store: StoreUnderTest, clock: FakeClock, target: str, state: JobState, **fields: Any
) -> UUID:
    """A job of ``target`` brought to ``state``, a second after the previous one."""
    clock.advance(timedelta(seconds=1))
    return job_in_state(store, clock, state, invocation=Invocation(target=target), **fields)


def _entries(
    store: StoreUnderTest, tenant: TenantFilter | None = None, target: str | None = None
) -> dict[str, CatalogEntry]:
    entries = store.monitoring.get_catalog(tenant or TenantFilter.any(), target)
    return {entry.target: entry for entry in entries}


def _failing(store: StoreUnderTest, clock: FakeClock, target: str, error: str) -> UUID:
    """A job of ``target`` that failed once with ``error`` and waits for its retry."""
    clock.advance(timedelta(seconds=1))
    queue = f"failing-{target}-{clock.now().timestamp()}"
    job_id = enqueue(store, clock, invocation=Invocation(target=target), queue=queue)
    job = claim_one(store, queues=[queue])
    assert store.jobs.apply(fail(job, clock, retry_in=timedelta(hours=1), error=error))
    return job_id


class CatalogFacts(FactGroup):
    heading: ClassVar[str] = "Job catalog"

    def test_the_catalog_counts_each_functions_jobs_per_state_with_zeros(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """One entry per function, by target, with its jobs in every state, zeros too."""
        for state in (JobState.SUCCEEDED, JobState.SUCCEEDED, JobState.DEAD, JobState.ENQUEUED):
            _job(store, clock, ALPHA, state)
        _job(store, clock, BETA, JobState.CANCELLED)

        entries = _entries(store)

        assert list(entries) == [ALPHA, BETA]
        assert entries[ALPHA].jobs_by_state == {
            **dict.fromkeys(JobState, 0),
            JobState.SUCCEEDED: 2,
            JobState.DEAD: 1,
            JobState.ENQUEUED: 1,
        }
        assert entries[BETA].jobs_by_state[JobState.CANCELLED] == 1
        assert entries[ALPHA].failure_rate == 1 / 3
        assert entries[BETA].failure_rate is None

    def test_the_last_error_is_the_newest_failed_or_dead_jobs(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """The last error is the newest dead or failed job's, in any queue; or none."""
        _failing(store, clock, ALPHA, "first")
        clock.advance(timedelta(seconds=1))
        queue = f"dying-{clock.now().timestamp()}"
        newest = enqueue(store, clock, invocation=Invocation(target=ALPHA), queue=queue)
        assert store.jobs.apply(die(claim_one(store, queues=[queue]), clock, error="newest"))
        _job(store, clock, ALPHA, JobState.SUCCEEDED)
        _job(store, clock, BETA, JobState.SUCCEEDED)

        entries = _entries(store)

        assert (entries[ALPHA].last_error, entries[ALPHA].last_error_job) == ("newest", newest)
        assert entries[BETA].last_error is None and entries[BETA].last_error_job is None

    def test_a_failed_job_newer_than_every_dead_one_gives_the_last_error(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """A job awaiting its retry, newer than the dead ones, gives the last error."""
        _job(store, clock, ALPHA, JobState.DEAD)
        failing = _failing(store, clock, ALPHA, "retrying")

        entry = _entries(store)[ALPHA]

        assert (entry.last_error, entry.last_error_job) == ("retrying", failing)

    def test_the_catalog_of_one_function_holds_its_entry_alone(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Asked for one target: its entry alone, or none for a target without jobs."""
        _job(store, clock, ALPHA, JobState.SUCCEEDED)
        _job(store, clock, BETA, JobState.SUCCEEDED)

        assert list(_entries(store, target=BETA)) == [BETA]
        assert _entries(store, target="catalog.jobs:unknown") == {}

    def test_the_catalog_counts_the_tenants_jobs_only(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """With a tenant filter, only that tenant's jobs (or the untenanted) count."""
        _job(store, clock, ALPHA, JobState.SUCCEEDED, tenant_id="acme")
        _job(store, clock, ALPHA, JobState.ENQUEUED, tenant_id="acme")
        _job(store, clock, ALPHA, JobState.SUCCEEDED)
        _job(store, clock, BETA, JobState.DEAD)

        acme = _entries(store, tenant=TenantFilter.of("acme"))
        untenanted = _entries(store, tenant=TenantFilter.untenanted())

        assert list(acme) == [ALPHA]
        assert acme[ALPHA].total == 2
        assert untenanted[ALPHA].jobs_by_state[JobState.SUCCEEDED] == 1
        assert untenanted[BETA].last_error is not None

    def test_the_counts_hold_through_folding_and_drop_with_the_purge(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Folding keeps the finished jobs' counts; a purge takes its jobs out of them."""
        for _ in range(3):
            _job(store, clock, ALPHA, JobState.SUCCEEDED)
        store.monitoring.fold_statistics(100)
        assert _entries(store)[ALPHA].jobs_by_state[JobState.SUCCEEDED] == 3

        clock.advance(timedelta(seconds=1))
        assert store.jobs.purge_finished(clock.now(), 2) == 2

        assert _entries(store)[ALPHA].jobs_by_state[JobState.SUCCEEDED] == 1


class TagCatalogFacts(FactGroup):
    heading: ClassVar[str] = "Job catalog: per tag"

    def test_a_tags_catalog_holds_the_functions_its_jobs_were_stored_with(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """With a tag: the functions any job carried it on, each with all its figures."""
        _job(store, clock, ALPHA, JobState.SUCCEEDED, tags=("billing", "eu"))
        _job(store, clock, ALPHA, JobState.DEAD)
        _job(store, clock, BETA, JobState.ENQUEUED, tags=("mail",))
        _job(store, clock, GAMMA, JobState.ENQUEUED)

        billing = store.monitoring.get_catalog(TenantFilter.any(), tag="billing")
        every = _entries(store)

        assert [entry.target for entry in billing] == [ALPHA]
        assert billing[0].total == 2 and billing[0].tags == ("billing", "eu")
        assert (every[BETA].tags, every[GAMMA].tags) == (("mail",), ())
        assert store.monitoring.get_catalog(TenantFilter.any(), tag="unseen") == []

    def test_a_functions_tags_are_kept_after_its_tagged_jobs_go(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """A tag once stored on a function's job stays its tag after that job is purged."""
        _job(store, clock, ALPHA, JobState.SUCCEEDED, tags=("billing",))
        clock.advance(timedelta(seconds=1))
        assert store.jobs.purge_finished(clock.now(), 10) == 1
        _job(store, clock, ALPHA, JobState.ENQUEUED)

        (entry,) = store.monitoring.get_catalog(TenantFilter.any(), tag="billing")

        assert (entry.target, entry.total, entry.tags) == (ALPHA, 1, ("billing",))

    def test_racing_enqueues_of_a_new_tag_store_every_job_and_the_tag_once(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Racers enqueueing the first jobs of a function with a new tag all succeed, and
        the tag's catalog then holds the function once, with all their jobs."""
        racers = self.contention.racers
        for round_no in range(self.contention.rounds):
            tag = f"new-{round_no}"
            jobs = [
                make_job(clock, invocation=Invocation(target=ALPHA), tags=(tag,))
                for _ in range(racers)
            ]

            stored = race(store, [partial(store.jobs.enqueue, [job]) for job in jobs])

            assert sorted(stored) == sorted([job.id] for job in jobs)
            (entry,) = store.monitoring.get_catalog(TenantFilter.any(), tag=tag)
            assert entry.target == ALPHA and tag in entry.tags

    def test_a_tags_total_sums_its_functions_figures(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """catalog_total sums counts and run times and keeps the newest last error."""
        _job(store, clock, ALPHA, JobState.SUCCEEDED, tags=("billing",))
        _failing(store, clock, ALPHA, "older")
        newest = _failing(store, clock, BETA, "newest")
        _job(store, clock, BETA, JobState.SUCCEEDED, tags=("billing",))

        total = catalog_total(
            "billing", store.monitoring.get_catalog(TenantFilter.any(), tag="billing")
        )

        assert total.jobs_by_state[JobState.SUCCEEDED] == 2
        assert total.jobs_by_state[JobState.FAILED] == 2
        assert (total.last_error, total.last_error_job) == ("newest", newest)
        assert total.tags == ("billing",)


def _ran(store: StoreUnderTest, clock: FakeClock, seconds: list[float]) -> list[JobTransition]:
    """Successes of ALPHA claimed together that ran ``seconds`` each, not yet applied."""
    queue = f"runs-{clock.now().timestamp()}"
    for _ in seconds:
        enqueue(store, clock, invocation=Invocation(target=ALPHA), queue=queue)
    claimed = claim(store, queues=[queue], max_count=len(seconds))
    start = clock.now()
    done = []
    for job, ran in zip(claimed, seconds, strict=True):
        clock.set(start + timedelta(seconds=ran))
        done.append(succeed(job, clock))
    clock.set(start + timedelta(seconds=max(seconds)))
    return done


class RunTimeFacts(FactGroup):
    heading: ClassVar[str] = "Job catalog: run times"

    def test_a_claim_stamps_when_the_attempt_started(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Every claim sets started_at to the storage clock's now; it stays after success."""
        job_id = enqueue(store, clock)
        clock.advance(timedelta(seconds=3))
        job = claim_one(store)
        started = clock.now()
        clock.advance(timedelta(seconds=2))
        assert store.jobs.apply(succeed(job, clock))

        assert job.started_at == started
        assert stored_job(store, job_id).started_at == started

    def test_run_times_are_bucket_estimates_of_the_last_hours_successes(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """p50 and p95 are the upper bounds of the buckets they fall in (batch acknowledged)."""
        done = _ran(store, clock, [0.7] * 9 + [100.0])
        assert store.jobs.apply_many(done) == [True] * 10

        entry = _entries(store)[ALPHA]

        assert entry.recent_runs == 10
        assert entry.run_time_p50 == timedelta(seconds=1)
        assert entry.run_time_p95 == timedelta(seconds=120)

    def test_a_success_applied_alone_counts_its_run_time(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """A success applied on its own (apply) counts its run time like a batch's."""
        (done,) = _ran(store, clock, [3.0])
        assert store.jobs.apply(done)

        entry = _entries(store)[ALPHA]

        assert (entry.recent_runs, entry.run_time_p50) == (1, timedelta(seconds=5))

    def test_run_times_leave_out_failures_and_successes_past_the_window(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Failed attempts have no run time; a success drops out an hour after its minute."""
        _failing(store, clock, ALPHA, "boom")
        (done,) = _ran(store, clock, [0.2])
        assert store.jobs.apply(done)
        assert _entries(store)[ALPHA].recent_runs == 1

        clock.advance(RUN_TIME_WINDOW + timedelta(minutes=1))
        store.monitoring.fold_statistics(100)

        entry = _entries(store)[ALPHA]
        assert entry.recent_runs == 0 and entry.run_time_p50 is None
