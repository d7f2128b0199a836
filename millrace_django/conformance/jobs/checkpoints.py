"""Checkpoints: a workflow cursor commits in the same atom as the job transition carrying it."""

from __future__ import annotations

from datetime import timedelta
from functools import partial
from typing import ClassVar, Literal
from uuid import UUID

import pytest

from millrace_django.clock import FakeClock
from millrace_django.conformance.harness import StoreUnderTest
from millrace_django.conformance.suite import FactGroup
from millrace_django.conformance.support import (
    claim,
    claim_new,
    create_instance,
    enqueue,
    make_bookmark,
    make_instance,
    make_job,
    race,
    state_of,
    stored_instance,
    stored_job,
    succeed,
    transition,
    with_fields,
)
from millrace_django.contract import (
    JSON,
    InstanceState,
    JobRecord,
    JobState,
    JobTransition,
    TenantFilter,
    WorkflowCheckpoint,
    WorkflowInstanceRecord,
)
from millrace_django.errors import ConcurrencyConflict, StorageError

Outcome = Literal["applied", "fenced", "conflict"]


def _start_instance(store: StoreUnderTest, clock: FakeClock) -> WorkflowInstanceRecord:
    stored = create_instance(store, clock, data={"step": 0})
    assert stored.revision == 1
    return stored


def _checkpoint(
    instance: WorkflowInstanceRecord,
    clock: FakeClock,
    *,
    expected: int,
    data: JSON,
    cursor: JSON = None,
) -> WorkflowCheckpoint:
    moved = with_fields(instance, data=data, cursor=cursor, updated_at=clock.now())
    return WorkflowCheckpoint(instance=moved, expected_revision=expected)


def _claim_activity(
    store: StoreUnderTest, clock: FakeClock, instance: WorkflowInstanceRecord, node: str = "a"
) -> JobRecord:
    return claim_new(
        store,
        clock,
        "flows",
        workflow_instance_id=instance.id,
        activity_node_id=node,
        idempotency_key=f"activity-{instance.id}-{node}",
    )


def _apply_outcome(store: StoreUnderTest, move: JobTransition) -> Outcome:
    try:
        applied = store.jobs.apply(move)
    except ConcurrencyConflict:
        return "conflict"
    return "applied" if applied else "fenced"


def _assert_untouched_processing(store: StoreUnderTest, claimed: JobRecord) -> None:
    job = stored_job(store, claimed.id)
    assert job.state is JobState.PROCESSING
    assert job.worker_id == claimed.worker_id
    assert job.attempt == claimed.attempt
    assert job.lease_until == claimed.lease_until
    assert job.failures == claimed.failures
    assert job.finished_at is None
    assert job.last_error is None
    assert job.result is None


def _assert_key_held(store: StoreUnderTest, clock: FakeClock, holder: JobRecord) -> None:
    assert holder.idempotency_key is not None
    probe = make_job(clock, queue="probes", idempotency_key=holder.idempotency_key)
    assert store.jobs.enqueue([probe]) == [holder.id]
    assert store.jobs.get_job(probe.id) is None


def _assert_instance(
    store: StoreUnderTest, instance_id: UUID, expected: WorkflowInstanceRecord
) -> None:
    stored = stored_instance(store, instance_id)
    assert stored.revision == expected.revision
    assert stored.data == expected.data
    assert stored.cursor == expected.cursor
    assert stored.state is expected.state
    assert stored.updated_at == expected.updated_at


def _first_steps(
    clock: FakeClock,
    jobs: list[JobRecord],
    instances: list[WorkflowInstanceRecord],
    follow_ups: list[JobRecord],
) -> list[JobTransition]:
    """Each job's success moving its instance from revision 1 to ``{"step": 1}``, with
    its follow-up job."""
    return [
        succeed(
            job,
            clock,
            enqueue=[follow_up],
            checkpoint=_checkpoint(instance, clock, expected=1, data={"step": 1}),
        )
        for job, instance, follow_up in zip(jobs, instances, follow_ups, strict=True)
    ]


class CheckpointFacts(FactGroup):
    heading: ClassVar[str] = "Checkpoints"

    def test_a_checkpoint_transition_and_its_enqueue_all_commit_together(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """A succeeded transition carrying a checkpoint, an insert and a bookmark commits all."""
        instance = _start_instance(store, clock)
        job = _claim_activity(store, clock, instance)
        clock.advance(timedelta(seconds=30))
        follow_up = make_job(
            clock, queue="flows", workflow_instance_id=instance.id, activity_node_id="b"
        )
        bookmark = make_bookmark(clock, instance.id)
        checkpoint = _checkpoint(
            instance, clock, expected=1, data={"step": 1}, cursor={"at": ["b"], "done": ["a"]}
        )

        applied = store.jobs.apply(
            succeed(
                job,
                clock,
                result={"ok": True},
                enqueue=[follow_up],
                checkpoint=checkpoint,
                bookmarks=[bookmark],
            )
        )

        assert applied is True
        done = stored_job(store, job.id)
        assert done.state is JobState.SUCCEEDED
        assert done.finished_at == clock.now()
        assert done.worker_id is None
        assert done.lease_until is None
        assert done.result == {"ok": True}
        inserted = stored_job(store, follow_up.id)
        assert inserted.state is JobState.ENQUEUED
        assert inserted.workflow_instance_id == instance.id
        assert inserted.activity_node_id == "b"
        stored = stored_instance(store, instance.id)
        assert stored.revision == 2
        assert stored.data == {"step": 1}
        assert stored.cursor == {"at": ["b"], "done": ["a"]}
        assert stored.updated_at == clock.now()
        assert stored.created_at == instance.created_at
        consumed = store.workflows.consume_bookmark("approved", "order-1")
        assert consumed is not None
        assert consumed.id == bookmark.id
        assert consumed.instance_id == instance.id

    def test_a_stale_checkpoint_revision_rolls_back_the_whole_transition(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """A checkpoint expecting an old revision raises ConcurrencyConflict and changes nothing."""
        instance = _start_instance(store, clock)
        store.workflows.update_instance(with_fields(instance, data={"step": 1}), 1)
        moved_on = stored_instance(store, instance.id)
        assert moved_on.revision == 2
        job = _claim_activity(store, clock, instance)
        child = make_job(clock, queue="children", state=JobState.AWAITING, parent_id=job.id)
        store.jobs.enqueue([child])
        follow_up = make_job(clock, queue="flows")
        bookmark = make_bookmark(clock, instance.id)
        stale = _checkpoint(instance, clock, expected=1, data={"step": 99})

        with pytest.raises(ConcurrencyConflict):
            store.jobs.apply(
                succeed(
                    job,
                    clock,
                    enqueue=[follow_up],
                    checkpoint=stale,
                    bookmarks=[bookmark],
                    activate_continuations=True,
                )
            )

        _assert_untouched_processing(store, job)
        assert store.jobs.get_job(follow_up.id) is None
        assert state_of(store, child.id) is JobState.AWAITING
        assert store.workflows.consume_bookmark("approved", "order-1") is None
        _assert_instance(store, instance.id, moved_on)
        _assert_key_held(store, clock, job)
        # The fence survived intact: the same worker can retry against the fresh revision.
        fresh = _checkpoint(moved_on, clock, expected=2, data={"step": 2})
        assert store.jobs.apply(succeed(job, clock, checkpoint=fresh)) is True
        stored = stored_instance(store, instance.id)
        assert stored.revision == 3
        assert stored.data == {"step": 2}

    def test_a_checkpoint_for_a_missing_instance_rolls_back_the_whole_transition(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """A checkpoint naming an instance that does not exist raises ConcurrencyConflict."""
        ghost = make_instance(clock, data={"step": 0})
        job = _claim_activity(store, clock, ghost)
        follow_up = make_job(clock, queue="flows")
        checkpoint = _checkpoint(ghost, clock, expected=1, data={"step": 1})

        with pytest.raises(ConcurrencyConflict):
            store.jobs.apply(succeed(job, clock, enqueue=[follow_up], checkpoint=checkpoint))

        _assert_untouched_processing(store, job)
        assert store.jobs.get_job(follow_up.id) is None
        assert store.workflows.get_instance(ghost.id) is None
        _assert_key_held(store, clock, job)

    def test_a_fenced_out_transition_returns_false_and_leaves_the_instance_untouched(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """A fence rejection returns False without raising, even with a stale checkpoint."""
        instance = _start_instance(store, clock)
        job = _claim_activity(store, clock, instance)
        follow_up = make_job(clock, queue="flows")
        valid = _checkpoint(instance, clock, expected=1, data={"step": 1})
        stale = _checkpoint(instance, clock, expected=7, data={"step": 7})

        wrong_attempt = transition(
            job,
            JobState.SUCCEEDED,
            expected_attempt=job.attempt + 1,
            finished_at=clock.now(),
            enqueue=[follow_up],
            checkpoint=valid,
        )
        wrong_worker = transition(
            job,
            JobState.SUCCEEDED,
            expected_worker_id="w2",
            finished_at=clock.now(),
            enqueue=[follow_up],
            checkpoint=stale,
        )

        assert store.jobs.apply(wrong_attempt) is False
        assert store.jobs.apply(wrong_worker) is False

        _assert_untouched_processing(store, job)
        assert store.jobs.get_job(follow_up.id) is None
        _assert_instance(store, instance.id, instance)

    def test_concurrent_branch_checkpoints_have_exactly_one_winner(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Racing branches checkpointing one revision: one applies, the rest conflict intact."""
        racers = self.contention.racers
        for round_no in range(self.contention.rounds):
            instance = _start_instance(store, clock)
            queue = f"branches-{round_no}"
            for branch in range(racers):
                enqueue(
                    store,
                    clock,
                    queue=queue,
                    workflow_instance_id=instance.id,
                    activity_node_id=f"branch-{branch}",
                )
            jobs = claim(store, "w1", queues=[queue], max_count=racers)
            assert len(jobs) == racers
            checkpoints = [
                _checkpoint(instance, clock, expected=1, data={"winner": str(job.id)})
                for job in jobs
            ]

            transitions = [
                succeed(job, clock, checkpoint=checkpoint)
                for job, checkpoint in zip(jobs, checkpoints, strict=True)
            ]
            outcomes = race(store, [partial(_apply_outcome, store, t) for t in transitions])

            assert outcomes.count("applied") == 1, outcomes
            assert outcomes.count("conflict") == racers - 1, outcomes
            winner = jobs[outcomes.index("applied")]
            stored = stored_instance(store, instance.id)
            assert stored.revision == 2
            assert stored.data == {"winner": str(winner.id)}
            assert state_of(store, winner.id) is JobState.SUCCEEDED
            losers = [job for job in jobs if job.id != winner.id]
            for loser in losers:
                _assert_untouched_processing(store, loser)
            # A loser keeps its fence, so it can remerge against the winner's revision.
            remerge = _checkpoint(stored, clock, expected=2, data={"merged": True})
            assert store.jobs.apply(succeed(losers[0], clock, checkpoint=remerge)) is True
            for loser in losers[1:]:
                assert store.jobs.apply(succeed(loser, clock)) is True

    def test_a_transition_without_a_checkpoint_leaves_the_instance_alone(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """A workflow job's plain transition applies and never touches its instance's revision."""
        instance = _start_instance(store, clock)
        store.workflows.update_instance(with_fields(instance, data={"step": 1}), 1)
        moved_on = stored_instance(store, instance.id)
        job = _claim_activity(store, clock, instance)
        clock.advance(timedelta(seconds=5))

        assert store.jobs.apply(succeed(job, clock)) is True

        done = stored_job(store, job.id)
        assert done.state is JobState.SUCCEEDED
        assert done.finished_at == clock.now()
        assert done.worker_id is None
        assert done.lease_until is None
        _assert_instance(store, instance.id, moved_on)

    # -- many steps in one call ------------------------------------------------------------

    def test_steps_of_distinct_instances_in_one_call_each_commit_their_checkpoint(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """``apply_many`` with a step of each of several instances applies every one: each
        checkpoint, follow-up job and bookmark is stored, as ``apply`` would store it."""
        instances = [_start_instance(store, clock) for _ in range(4)]
        jobs = [_claim_activity(store, clock, instance) for instance in instances]
        clock.advance(timedelta(seconds=3))
        follow_ups = [
            make_job(clock, queue="flows", workflow_instance_id=i.id, activity_node_id="b")
            for i in instances
        ]
        bookmark = make_bookmark(clock, instances[2].id)
        transitions = [
            succeed(
                job,
                clock,
                result={"n": n},
                enqueue=[follow_up],
                checkpoint=_checkpoint(instance, clock, expected=1, data={"step": n}),
                bookmarks=[bookmark] if n == 2 else [],
            )
            for n, (job, instance, follow_up) in enumerate(
                zip(jobs, instances, follow_ups, strict=True)
            )
        ]

        assert store.jobs.apply_many(transitions) == [True] * 4

        for n, (job, instance, follow_up) in enumerate(
            zip(jobs, instances, follow_ups, strict=True)
        ):
            done = stored_job(store, job.id)
            assert done.state is JobState.SUCCEEDED
            assert done.result == {"n": n}
            assert done.finished_at == clock.now()
            stored = stored_instance(store, instance.id)
            assert stored.revision == 2
            assert stored.data == {"step": n}
            assert stored.updated_at == clock.now()
            assert state_of(store, follow_up.id) is JobState.ENQUEUED
        consumed = store.workflows.consume_bookmark("approved", "order-1")
        assert consumed is not None
        assert consumed.id == bookmark.id

    def test_in_one_call_a_stale_checkpoint_conflicts_alone(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Among steps applied together, one whose instance moved on answers
        ``ConcurrencyConflict`` and writes nothing (its job stays ``processing`` under its
        fence, its follow-up is not stored); the others are applied."""
        instances = [_start_instance(store, clock) for _ in range(3)]
        jobs = [_claim_activity(store, clock, instance) for instance in instances]
        store.workflows.update_instance(with_fields(instances[1], data={"moved": True}), 1)
        moved_on = stored_instance(store, instances[1].id)
        follow_ups = [make_job(clock, queue="flows") for _ in instances]
        transitions = _first_steps(clock, jobs, instances, follow_ups)

        first, conflict, last = store.jobs.apply_many(transitions)

        assert (first, last) == (True, True)
        assert isinstance(conflict, ConcurrencyConflict)
        _assert_untouched_processing(store, jobs[1])
        assert store.jobs.get_job(follow_ups[1].id) is None
        _assert_instance(store, instances[1].id, moved_on)
        for n in (0, 2):
            assert state_of(store, jobs[n].id) is JobState.SUCCEEDED
            assert state_of(store, follow_ups[n].id) is JobState.ENQUEUED
            assert stored_instance(store, instances[n].id).revision == 2

    def test_in_one_call_a_lost_fence_writes_nothing_of_its_step(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Among steps applied together, one whose fence no longer holds answers
        ``False`` and leaves its instance and follow-up unwritten; the others apply."""
        instances = [_start_instance(store, clock) for _ in range(3)]
        jobs = [_claim_activity(store, clock, instance) for instance in instances]
        follow_ups = [make_job(clock, queue="flows") for _ in instances]
        transitions = [
            transition(
                job,
                JobState.SUCCEEDED,
                finished_at=clock.now(),
                expected_attempt=job.attempt + (1 if n == 0 else 0),
                enqueue=[follow_up],
                checkpoint=_checkpoint(instance, clock, expected=1, data={"step": 1}),
            )
            for n, (job, instance, follow_up) in enumerate(
                zip(jobs, instances, follow_ups, strict=True)
            )
        ]

        assert store.jobs.apply_many(transitions) == [False, True, True]

        _assert_untouched_processing(store, jobs[0])
        assert store.jobs.get_job(follow_ups[0].id) is None
        _assert_instance(store, instances[0].id, instances[0])
        assert stored_instance(store, instances[1].id).revision == 2

    def test_in_one_call_two_steps_of_one_instance_have_one_winner(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Two branches of one instance acknowledged in the same call, both expecting its
        revision: one applies, the other conflicts and writes nothing."""
        instance = _start_instance(store, clock)
        branches = [_claim_activity(store, clock, instance, node) for node in ("a", "b")]
        transitions = [
            succeed(
                job,
                clock,
                checkpoint=_checkpoint(instance, clock, expected=1, data={"by": str(job.id)}),
            )
            for job in branches
        ]

        results = store.jobs.apply_many(transitions)

        assert results.count(True) == 1, results
        loser = branches[results.index(True) ^ 1]
        assert isinstance(results[results.index(True) ^ 1], ConcurrencyConflict)
        winner = branches[results.index(True)]
        _assert_untouched_processing(store, loser)
        stored = stored_instance(store, instance.id)
        assert stored.revision == 2
        assert stored.data == {"by": str(winner.id)}

    def test_in_one_call_a_step_whose_follow_up_cannot_be_stored_fails_alone(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Among steps applied together, one whose follow-up job cannot be stored (its id
        is taken) is refused with nothing of it written; the others apply."""
        taken = enqueue(store, clock, queue="elsewhere")
        instances = [_start_instance(store, clock) for _ in range(3)]
        jobs = [_claim_activity(store, clock, instance) for instance in instances]
        follow_ups = [make_job(clock, queue="flows") for _ in instances]
        follow_ups[1] = with_fields(follow_ups[1], id=taken)
        transitions = _first_steps(clock, jobs, instances, follow_ups)

        first, refused, last = store.jobs.apply_many(transitions)

        assert (first, last) == (True, True)
        assert isinstance(refused, StorageError)
        _assert_untouched_processing(store, jobs[1])
        _assert_instance(store, instances[1].id, instances[1])
        assert stored_job(store, taken).queue == "elsewhere"
        assert stored_instance(store, instances[2].id).revision == 2

    def test_a_step_that_ends_its_instance_counts_it_when_applied_with_others(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """An instance completed by a step acknowledged together with others is counted
        among the completed instances."""
        instances = [_start_instance(store, clock) for _ in range(2)]
        jobs = [_claim_activity(store, clock, instance) for instance in instances]
        before = store.monitoring.get_statistics(TenantFilter.any()).instances_by_state
        transitions = [
            succeed(
                job,
                clock,
                checkpoint=WorkflowCheckpoint(
                    instance=with_fields(
                        instance, state=InstanceState.COMPLETED, updated_at=clock.now()
                    ),
                    expected_revision=1,
                ),
            )
            for job, instance in zip(jobs, instances, strict=True)
        ]

        assert store.jobs.apply_many(transitions) == [True, True]

        after = store.monitoring.get_statistics(TenantFilter.any()).instances_by_state
        assert after[InstanceState.COMPLETED] == before[InstanceState.COMPLETED] + 2
        assert after[InstanceState.RUNNING] == before[InstanceState.RUNNING] - 2

    def test_in_one_call_siblings_planned_one_onto_another_apply_in_order(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Steps of one instance, each expecting the revision the one before it in the
        call leaves, are all applied: the instance ends at the last one's checkpoint."""
        instance = _start_instance(store, clock)
        branches = [_claim_activity(store, clock, instance, node) for node in "abc"]
        transitions = [
            succeed(
                job,
                clock,
                checkpoint=_checkpoint(
                    instance, clock, expected=1 + n, data={"done": list("abc"[: n + 1])}
                ),
            )
            for n, job in enumerate(branches)
        ]

        assert store.jobs.apply_many(transitions) == [True, True, True]

        stored = stored_instance(store, instance.id)
        assert stored.revision == 4
        assert stored.data == {"done": ["a", "b", "c"]}
        for job in branches:
            assert state_of(store, job.id) is JobState.SUCCEEDED

    def test_in_one_call_a_sibling_planned_onto_an_unapplied_step_does_not_land(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """A step expecting the revision an earlier step of the same call would leave is
        not applied when that one is not, even if another writer brought the instance
        to that revision meanwhile: it answers ``ConcurrencyConflict`` and changes
        nothing (it was planned on the earlier step's state, not on the writer's)."""
        instance = _start_instance(store, clock)
        first, second = (_claim_activity(store, clock, instance, node) for node in "ab")
        store.workflows.update_instance(with_fields(instance, data={"by": "other"}), 1)
        moved_on = stored_instance(store, instance.id)
        assert moved_on.revision == 2
        transitions = [
            succeed(first, clock, checkpoint=_checkpoint(instance, clock, expected=1, data={})),
            succeed(
                second,
                clock,
                checkpoint=_checkpoint(instance, clock, expected=2, data={"by": "a+b"}),
            ),
        ]

        results = store.jobs.apply_many(transitions)

        assert all(isinstance(r, ConcurrencyConflict) for r in results), results
        _assert_untouched_processing(store, first)
        _assert_untouched_processing(store, second)
        _assert_instance(store, instance.id, moved_on)
