"""Cancelling instances, and re-merging parallel checkpoints that lost the revision race
(in the test runner and in the worker)."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any
from uuid import uuid4

import pytest

from millrace_django.clock import FakeClock
from millrace_django.contract import (
    ClaimRequest,
    InstanceState,
    JobState,
    JobTransition,
)
from millrace_django.engine import EngineSettings, JobContext, Retry
from millrace_django.engine.workflow import WorkflowClient
from millrace_django.errors import ConcurrencyConflict
from millrace_django.runtime import RuntimeSettings, Worker, acks, run_claimed
from millrace_django.runtime.execution import REMERGE_ATTEMPTS, remerge
from millrace_django.storage.memory import MemoryStorage
from millrace_django.testing import JobRunner
from tests.unit.runtime.helpers import WorkerThread, wait_until
from tests.unit.workflow import flows
from tests.unit.workflow.test_signals import bookmarks

CONFIG = EngineSettings(default_retry=Retry.none())


def claim_all(runner: JobRunner, worker: str = "w") -> list[Any]:
    return runner.storage.claim(
        ClaimRequest(
            worker_id=worker,
            queues=frozenset({"default"}),
            max_count=100,
            lease=timedelta(minutes=5),
        )
    )


def run(runner: JobRunner, job: Any) -> tuple[JobTransition, JobContext]:
    context = JobContext.for_job(job, runner.clock, storage=runner.storage)
    outcome = run_claimed(job, context, clock=runner.clock, config=runner.config)
    assert outcome.transition is not None, outcome
    return outcome.transition, context


# -- cancellation -----------------------------------------------------------------------


def test_cancelling_an_instance_cancels_its_pending_jobs(
    runner: JobRunner, workflows: WorkflowClient
) -> None:
    instance_id = workflows.start(flows.FANOUT)
    assert workflows.cancel(instance_id)
    runner.assert_instance(instance_id, InstanceState.CANCELLED)
    assert {j.state for j in runner.jobs()} == {JobState.CANCELLED}
    assert runner.run_until_idle() == 0
    assert flows.calls == []
    position = workflows.position(instance_id)
    assert (position.running, position.waiting) == ((), ())
    assert workflows.cancel(instance_id) is False


def test_cancelling_a_waiting_instance_removes_its_bookmarks_and_timers(
    runner: JobRunner, workflows: WorkflowClient
) -> None:
    instance_id = workflows.start(flows.WAIT_WITH_TIMEOUT, {"key": "k"})
    runner.run_until_idle()
    assert bookmarks(runner) == 1
    assert workflows.cancel(instance_id)
    assert bookmarks(runner) == 0
    assert workflows.signal("go", "k", 1) is False
    runner.advance(timedelta(hours=1))
    assert runner.run_until_idle() == 0
    runner.assert_instance(instance_id, InstanceState.CANCELLED)


def test_a_running_step_of_a_cancelled_instance_is_asked_to_stop_and_its_checkpoint_dropped(
    runner: JobRunner, workflows: WorkflowClient
) -> None:
    instance_id = workflows.start(flows.LINEAR)
    (job,) = claim_all(runner)
    transition, context = run(runner, job)  # the activity ran, its success not yet written
    assert workflows.cancel(instance_id)
    assert runner.get(job.id).cancel_requested
    with pytest.raises(ConcurrencyConflict):
        runner.storage.apply(transition)
    final, result = remerge(runner.storage, job, context, transition, ConcurrencyConflict("x"))
    assert result is True
    assert final.checkpoint is None and not final.enqueue
    runner.assert_instance(instance_id, InstanceState.CANCELLED)
    assert runner.run_until_idle() == 0


def test_only_a_live_instance_can_be_cancelled(
    runner: JobRunner, workflows: WorkflowClient
) -> None:
    done = workflows.start(flows.LINEAR)
    runner.run_until_idle()
    assert workflows.cancel(done) is False
    assert workflows.cancel(uuid4()) is False
    runner.assert_instance(done, InstanceState.COMPLETED)


def test_a_suspended_instance_can_be_cancelled(
    runner: JobRunner, workflows: WorkflowClient
) -> None:
    flows.broken.add("charge_card")
    instance_id = workflows.start(flows.POLICY_SUSPEND)
    runner.run_until_idle(throw_on_failure=False)
    runner.assert_instance(instance_id, InstanceState.SUSPENDED)
    assert workflows.cancel(instance_id)
    assert workflows.recover(instance_id, "retry") is False
    runner.assert_instance(instance_id, InstanceState.CANCELLED)


# -- re-merging -------------------------------------------------------------------------


def test_parallel_checkpoints_that_collide_are_re_merged_without_re_running_the_activity(
    runner: JobRunner, workflows: WorkflowClient
) -> None:
    instance_id = workflows.start(flows.MERGING, {"drop_a": 1, "list": ["base"]})
    first, second = claim_all(runner)
    t1, _ = run(runner, first)
    t2, c2 = run(runner, second)
    assert sorted(flows.calls) == ["branch_a", "branch_b"]
    assert runner.storage.apply(t1) is True
    with pytest.raises(ConcurrencyConflict):
        runner.storage.apply(t2)
    final, result = remerge(runner.storage, second, c2, t2, ConcurrencyConflict("lost"))
    assert result is True
    assert sorted(flows.calls) == ["branch_a", "branch_b"]  # nothing ran again
    instance = runner.assert_instance(instance_id, InstanceState.RUNNING)
    assert instance.data == {
        "a": 1,
        "b": 2,
        "nested": {"a": True, "b": True},
        "list": ["b"],
    }
    assert instance.revision == 3
    assert [j.activity_node_id for j in final.enqueue] == ["a3"]  # the join opened once
    runner.run_until_idle()
    assert flows.calls[-1] == "after"
    runner.assert_instance(instance_id, InstanceState.COMPLETED)


def test_the_test_runner_re_merges_as_the_worker_does(
    runner: JobRunner, workflows: WorkflowClient
) -> None:
    instance_id = workflows.start(flows.MERGING)
    first, second = claim_all(runner, worker="millrace-test-runner")
    t1, _ = run(runner, first)
    assert runner.storage.apply(t1)
    # The runner now runs the other branch, having read the instance before the first
    # branch's checkpoint: its own checkpoint conflicts, and is re-merged.
    storage = runner.storage
    assert isinstance(storage, MemoryStorage)
    real_get = storage.get_instance
    current = real_get(instance_id)
    assert current is not None
    reads = {"n": 0}

    def first_read_is_stale(key: Any) -> Any:
        reads["n"] += 1
        return replace(current, revision=1) if reads["n"] == 1 else real_get(key)

    storage.get_instance = first_read_is_stale  # type: ignore[method-assign]
    try:
        runner._run(second, throw_on_failure=True)
    finally:
        del storage.get_instance  # type: ignore[method-assign]
    assert reads["n"] == 2  # the plan, then the re-merge's fresh read
    runner.run_until_idle()
    instance = runner.assert_instance(instance_id, InstanceState.COMPLETED)
    assert (instance.data["a"], instance.data["b"]) == (1, 2)
    assert sorted(flows.calls) == ["after", "branch_a", "branch_b"]


def test_a_checkpoint_still_conflicting_after_the_re_merges_is_released(
    runner: JobRunner, workflows: WorkflowClient
) -> None:
    workflows.start(flows.LINEAR)
    (job,) = claim_all(runner)
    transition, context = run(runner, job)
    storage = runner.storage
    assert isinstance(storage, MemoryStorage)
    real_apply = storage.apply
    tries = {"n": 0}

    def conflicting(t: JobTransition) -> bool:
        if t.checkpoint is not None:
            tries["n"] += 1
            raise ConcurrencyConflict("always stale")
        return real_apply(t)

    storage.apply = conflicting  # type: ignore[method-assign]
    try:
        final, result = remerge(storage, job, context, transition, ConcurrencyConflict("x"))
    finally:
        del storage.apply  # type: ignore[method-assign]
    assert tries["n"] == REMERGE_ATTEMPTS
    assert final.target is JobState.ENQUEUED and result is True
    released = runner.get(job.id)
    assert (released.state, released.failures) == (JobState.ENQUEUED, 0)
    runner.run_until_idle()
    assert flows.calls == ["first", "first", "second", "third"]  # at-least-once


def test_a_fan_out_of_twenty_branches_on_worker_threads_runs_each_activity_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    remerges = {"n": 0}

    def counted(*args: Any) -> Any:
        remerges["n"] += 1
        return remerge(*args)

    monkeypatch.setattr(acks, "remerge", counted)
    # Siblings acknowledged in one batch are chained and never collide: written as
    # planned, they collide, which is the path this test is about.
    monkeypatch.setattr(acks, "chain_checkpoints", lambda writes: [t for _, t in writes])
    clock = FakeClock()
    storage = MemoryStorage(clock)
    settings = RuntimeSettings(
        queues=frozenset({"default"}),
        default_retry=Retry.none(),
        concurrency=8,
        claim_batch=8,
        lease=timedelta(seconds=30),
        heartbeat=timedelta(seconds=10),
        poll_min=timedelta(milliseconds=2),
        poll_max=timedelta(milliseconds=20),
    )
    client = WorkflowClient(storage, clock, settings)
    ids = [client.start(flows.FANOUT_20, {"lines": list(range(20))}) for _ in range(3)]
    threads = [
        WorkerThread(Worker(storage, clock, settings, tick=timedelta(milliseconds=5))).start()
        for _ in range(2)
    ]
    try:
        wait_until(
            lambda: all(
                (i := client.get(n)) is not None and i.state is InstanceState.COMPLETED for n in ids
            ),
            "every fan-out to complete",
            timeout=20,
        )
    finally:
        for thread in threads:
            thread.close()
    for instance_id in ids:
        instance = client.get(instance_id)
        assert instance is not None
        assert instance.data["total"] == sum(n * 10 for n in range(20))
    assert len([c for c in flows.calls if c.startswith("line[")]) == 60
    assert flows.calls.count("total") == 3
    assert sum(t.worker.stats.refused for t in threads) == 0
    assert remerges["n"] > 0, "the branches never collided; the test proves nothing"
