"""Our additions to the reference contract: results, retention and batched transitions."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
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
    claim_one,
    die,
    enqueue,
    fail,
    job_details,
    job_in_state,
    make_instance,
    make_job,
    race,
    release,
    stored_instance,
    stored_job,
    succeed,
)
from millrace_django.contract import (
    JSON,
    JobRecord,
    JobState,
    JobTransition,
    WorkflowCheckpoint,
)
from millrace_django.errors import ConcurrencyConflict, ParentJobNotFound, StorageError
from millrace_django.ids import new_id

NESTED_RESULT: JSON = {
    "total": 12.5,
    "ratio": -0.001953125,
    "count": 9007199254740993,
    "items": [1, "two", None, True, False, {"é": "ü ✓ 日本語"}],
    "nested": {"deep": [[], {}, [[["x"]]]], "empty": ""},
}
BATCH = 64
RACING_JOBS = 8


def _claim_all(store: StoreUnderTest, worker: str, count: int, queue: str) -> list[JobRecord]:
    """Claim exactly ``count`` jobs of ``queue``, oldest first, tolerating short batches."""
    taken: list[JobRecord] = []
    while len(taken) < count:
        batch = claim(store, worker, queues=(queue,), max_count=count - len(taken))
        assert batch, f"only {len(taken)} of {count} jobs were claimable"
        taken.extend(batch)
    return taken


class ResultFacts(FactGroup):
    heading: ClassVar[str] = "Results"

    @pytest.mark.parametrize(
        "result",
        [NESTED_RESULT, [1, [2.25, "ß"], {"k": None}], "Zoë ✓", 0, 0.1, False, {}, []],
        ids=["nested", "list", "text", "zero", "float", "false", "empty-dict", "empty-list"],
    )
    def test_a_succeeded_transition_stores_its_json_result(
        self, store: StoreUnderTest, clock: FakeClock, result: JSON
    ) -> None:
        """Succeeded stores the transition's JSON result; GetJob returns it semantically equal."""
        job_id = enqueue(store, clock)
        job = claim_one(store, "w1")

        assert store.jobs.apply(succeed(job, clock, result=result)) is True

        stored = stored_job(store, job_id)
        assert stored.result == result
        assert type(stored.result) is type(result)

    def test_only_a_succeeded_transition_stores_a_result(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Failed, dead, released and cancelled jobs keep no result, even if one is carried."""
        carried: JSON = {"must": "not be stored"}
        failed_id = enqueue(store, clock, queue="failed")
        job = claim_one(store, "w1", queues=("failed",))
        assert store.jobs.apply(fail(job, clock, retry_in=timedelta(hours=1), result=carried))
        dead_id = enqueue(store, clock, queue="dead")
        job = claim_one(store, "w1", queues=("dead",))
        assert store.jobs.apply(die(job, clock, result=carried))
        released_id = enqueue(store, clock, queue="released")
        job = claim_one(store, "w1", queues=("released",))
        assert store.jobs.apply(replace(release(job), result=carried))
        cancelled_id = enqueue(store, clock, queue="cancelled")
        assert store.jobs.try_cancel(cancelled_id)

        expected_states = {
            failed_id: JobState.FAILED,
            dead_id: JobState.DEAD,
            released_id: JobState.ENQUEUED,
            cancelled_id: JobState.CANCELLED,
        }
        for job_id, state in expected_states.items():
            stored = stored_job(store, job_id)
            assert stored.state is state
            assert stored.result is None, f"a {state} job stored a result"

    def test_a_rejected_fence_stores_no_result(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """A transition rejected by the fence stores no result; the owner's result wins."""
        job_id = enqueue(store, clock)
        zombie = claim_one(store, "w1")
        clock.advance(LEASE)
        owner = claim_one(store, "w2")

        assert store.jobs.apply(succeed(zombie, clock, result={"from": "zombie"})) is False
        assert stored_job(store, job_id).result is None
        assert store.jobs.apply(succeed(owner, clock, result={"from": "owner"})) is True
        assert store.jobs.apply(succeed(zombie, clock, result={"from": "zombie"})) is False
        assert stored_job(store, job_id).result == {"from": "owner"}


class PurgeFacts(FactGroup):
    heading: ClassVar[str] = "Retention"

    def test_purge_deletes_only_terminal_jobs_finished_before_the_cutoff(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Purge deletes succeeded, dead and cancelled jobs with finished_at < before only."""
        start = clock.now()
        clock.set(start + timedelta(minutes=1))
        succeeded = job_in_state(store, clock, JobState.SUCCEEDED)
        clock.set(start + timedelta(minutes=2))
        dead = job_in_state(store, clock, JobState.DEAD)
        clock.set(start + timedelta(minutes=3))
        cancelled = job_in_state(store, clock, JobState.CANCELLED)
        cutoff = start + timedelta(minutes=5)
        clock.set(cutoff)
        at_cutoff = job_in_state(store, clock, JobState.SUCCEEDED)
        clock.set(start + timedelta(minutes=10))
        after = job_in_state(store, clock, JobState.DEAD)

        assert store.jobs.purge_finished(cutoff, 100) == 3

        for gone in (succeeded, dead, cancelled):
            assert store.jobs.get_job(gone) is None
        assert stored_job(store, at_cutoff).finished_at == cutoff
        assert stored_job(store, after).state is JobState.DEAD
        assert store.jobs.purge_finished(cutoff, 100) == 0

    def test_purge_deletes_the_oldest_finished_first_and_at_most_limit(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Purge deletes at most limit jobs per call, earliest finished_at first."""
        ids = store.jobs.enqueue([make_job(clock) for _ in range(5)])
        jobs = {job.id: job for job in _claim_all(store, "w1", 5, "default")}
        finish_order = [ids[3], ids[0], ids[4], ids[1], ids[2]]
        for job_id in finish_order:
            clock.advance(timedelta(seconds=1))
            assert store.jobs.apply(succeed(jobs[job_id], clock))
        clock.advance(timedelta(days=1))

        expected_counts = [2, 2, 1, 0]
        for call, count in enumerate(expected_counts):
            assert store.jobs.purge_finished(clock.now(), 2) == count
            purged = finish_order[: sum(expected_counts[: call + 1])]
            for job_id in finish_order:
                present = store.jobs.get_job(job_id) is not None
                assert present is (job_id not in purged), f"purge call {call + 1}"

    def test_purge_never_touches_active_jobs(self, store: StoreUnderTest, clock: FakeClock) -> None:
        """Old scheduled, enqueued, processing, failed and awaiting jobs survive any purge."""
        far = clock.now() + timedelta(days=60)
        scheduled = enqueue(store, clock, queue="s", state=JobState.SCHEDULED, due_at=far)
        enqueued = enqueue(store, clock, queue="e", idempotency_key="held")
        processing = enqueue(store, clock, queue="p")
        claim_one(store, "w1", queues=("p",))
        failed = enqueue(store, clock, queue="f")
        retrying = claim_one(store, "w1", queues=("f",))
        assert store.jobs.apply(fail(retrying, clock, retry_in=far - clock.now()))
        awaiting = enqueue(store, clock, queue="a", state=JobState.AWAITING, parent_id=processing)
        finished = job_in_state(store, clock, JobState.SUCCEEDED)
        active = [scheduled, enqueued, processing, failed, awaiting]
        snapshots = {job_id: stored_job(store, job_id) for job_id in active}
        clock.advance(timedelta(days=30))

        assert store.jobs.purge_finished(clock.now(), 100) == 1

        assert store.jobs.get_job(finished) is None
        for job_id, before in snapshots.items():
            assert store.jobs.get_job(job_id) == before
        assert store.jobs.purge_finished(clock.now() + timedelta(days=3650), 100) == 0
        assert enqueue(store, clock, idempotency_key="held") == enqueued

    def test_purge_removes_the_attempt_history_of_purged_jobs(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """A purged job's attempt history goes with it; other jobs' history stays."""
        purged_id = enqueue(store, clock, queue="purged")
        first = claim_one(store, "w1", queues=("purged",))
        assert store.jobs.apply(fail(first, clock, retry_in=timedelta(0)))
        assert store.jobs.activate_due(clock.now(), 10) == 1
        assert store.jobs.apply(die(claim_one(store, "w1", queues=("purged",)), clock))
        kept_id = enqueue(store, clock, queue="kept")
        kept = claim_one(store, "w1", queues=("kept",))
        assert store.jobs.apply(fail(kept, clock, retry_in=timedelta(days=1)))
        assert len(job_details(store, purged_id).attempts) == 2
        clock.advance(timedelta(hours=1))

        assert store.jobs.purge_finished(clock.now(), 100) == 1

        assert store.jobs.get_job(purged_id) is None
        assert store.monitoring.get_job_details(purged_id) is None
        assert len(job_details(store, kept_id).attempts) == 1
        # Ids are never reused in practice; storing one again makes leftover history visible.
        assert store.jobs.enqueue([make_job(clock, id=purged_id)]) == [purged_id]
        assert list(job_details(store, purged_id).attempts) == []

    def test_a_purged_jobs_idempotency_key_stays_free(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Purging a finished keyed job neither frees an active holder's key nor blocks reuse."""
        old = job_in_state(store, clock, JobState.SUCCEEDED, idempotency_key="k")
        holder = enqueue(store, clock, idempotency_key="k")
        assert holder != old
        clock.advance(timedelta(minutes=1))

        assert store.jobs.purge_finished(clock.now(), 100) == 1
        assert store.jobs.get_job(old) is None
        assert enqueue(store, clock, idempotency_key="k") == holder

        assert store.jobs.apply(succeed(claim_one(store, "w1"), clock))
        clock.advance(timedelta(minutes=1))
        assert store.jobs.purge_finished(clock.now(), 100) == 1
        fresh = make_job(clock, idempotency_key="k")
        assert store.jobs.enqueue([fresh]) == [fresh.id]
        assert stored_job(store, fresh.id).idempotency_key == "k"


class ApplyManyFacts(FactGroup):
    heading: ClassVar[str] = "Batched transitions"

    def test_apply_many_applies_each_position_independently(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """A fence failure in one position returns False there; the others still commit."""
        store.jobs.enqueue([make_job(clock) for _ in range(3)])
        good, fenced, failing = claim(store, "w1", max_count=3)
        before = stored_job(store, fenced.id)
        stray = make_job(clock)
        transitions = [
            succeed(good, clock, result="ok"),
            succeed(fenced, clock, expected_worker_id="w9", enqueue=[stray]),
            fail(failing, clock, retry_in=timedelta(minutes=5), error="oops"),
        ]

        assert store.jobs.apply_many(transitions) == [True, False, True]

        done = stored_job(store, good.id)
        assert done.state is JobState.SUCCEEDED
        assert done.result == "ok"
        assert stored_job(store, fenced.id) == before
        assert store.jobs.get_job(stray.id) is None
        retrying = stored_job(store, failing.id)
        assert retrying.state is JobState.FAILED
        assert retrying.failures == 1
        assert retrying.last_error == "oops"

    def test_a_storage_error_in_one_position_is_returned_and_the_others_commit(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """A stale checkpoint or missing parent is returned at its position, not raised."""
        instance = make_instance(clock)
        store.workflows.create_instance(instance)
        current = replace(instance, data={"step": 1}, revision=2)
        store.workflows.update_instance(current, expected_revision=1)
        store.jobs.enqueue([make_job(clock) for _ in range(4)])
        first, stale, orphaned, last = claim(store, "w1", max_count=4)
        stale_insert = make_job(clock)
        orphan = make_job(clock, state=JobState.AWAITING, parent_id=new_id(clock))
        checkpoint = WorkflowCheckpoint(
            instance=replace(instance, data={"step": 99}), expected_revision=1
        )
        transitions = [
            succeed(first, clock),
            succeed(stale, clock, checkpoint=checkpoint, enqueue=[stale_insert]),
            succeed(orphaned, clock, result="lost", enqueue=[orphan]),
            succeed(last, clock),
        ]

        outcomes = store.jobs.apply_many(transitions)

        assert len(outcomes) == 4
        assert outcomes[0] is True
        assert isinstance(outcomes[1], ConcurrencyConflict)
        assert isinstance(outcomes[2], ParentJobNotFound)
        assert outcomes[3] is True
        assert stored_job(store, first.id).state is JobState.SUCCEEDED
        assert stored_job(store, last.id).state is JobState.SUCCEEDED
        for untouched in (stale, orphaned):
            stored = stored_job(store, untouched.id)
            assert stored.state is JobState.PROCESSING
            assert stored.worker_id == "w1"
            assert stored.result is None
        assert store.jobs.get_job(stale_insert.id) is None
        assert store.jobs.get_job(orphan.id) is None
        after = stored_instance(store, instance.id)
        assert after.revision == 2
        assert after.data == {"step": 1}

    def test_a_batch_of_64_succeeded_transitions_all_commit(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """64 plain succeeded transitions in one batch all commit, each with its own result."""
        store.jobs.enqueue([make_job(clock) for _ in range(BATCH)])
        jobs = _claim_all(store, "w1", BATCH, "default")
        transitions = [succeed(job, clock, result={"n": n}) for n, job in enumerate(jobs)]

        assert store.jobs.apply_many(transitions) == [True] * BATCH

        for n, job in enumerate(jobs):
            stored = stored_job(store, job.id)
            assert stored.state is JobState.SUCCEEDED
            assert stored.result == {"n": n}
            assert stored.finished_at == clock.now()
            assert stored.worker_id is None

    def test_apply_many_of_no_transitions_returns_an_empty_list(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """An empty batch returns an empty list and changes nothing."""
        job_id = enqueue(store, clock)
        before = stored_job(store, job_id)

        assert store.jobs.apply_many([]) == []
        assert stored_job(store, job_id) == before

    def test_racing_apply_many_batches_give_each_job_exactly_one_winner(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Zombie and owner batches racing over reclaimed jobs: one owner win per job."""
        racers = self.contention.racers
        for round_number in range(self.contention.rounds):
            queue = f"round-{round_number}"
            store.jobs.enqueue([make_job(clock, queue=queue) for _ in range(RACING_JOBS)])
            zombie_jobs = _claim_all(store, "zombie", RACING_JOBS, queue)
            clock.advance(LEASE)
            owner_jobs = _claim_all(store, "owner", RACING_JOBS, queue)
            batches: list[list[JobTransition]] = []
            for racer in range(racers):
                jobs = owner_jobs if racer % 2 == 0 else zombie_jobs
                batch = [succeed(job, clock, result={"racer": racer}) for job in jobs]
                batches.append(batch if racer % 4 < 2 else batch[::-1])
            actions: list[Callable[[], list[bool | StorageError]]] = [
                partial(store.jobs.apply_many, batch) for batch in batches
            ]

            outcomes = race(store, actions)

            winners: dict[UUID, list[int]] = {job.id: [] for job in owner_jobs}
            for racer, (batch, results) in enumerate(zip(batches, outcomes, strict=True)):
                assert len(results) == RACING_JOBS
                for command, won in zip(batch, results, strict=True):
                    assert won is True or won is False, f"racer {racer} got {won!r}"
                    if won:
                        winners[command.job_id].append(racer)
            for job_id, won_by in winners.items():
                assert len(won_by) == 1, f"job {job_id} was won by racers {won_by}"
                (racer,) = won_by
                assert racer % 2 == 0, "a zombie's stale transition won"
                stored = stored_job(store, job_id)
                assert stored.state is JobState.SUCCEEDED
                assert stored.result == {"racer": racer}
                assert stored.attempt == 2
