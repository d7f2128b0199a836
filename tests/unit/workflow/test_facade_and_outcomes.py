"""The public facade, and the outcome rules' part in workflows."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

import millrace_django
from millrace_django import workflows
from millrace_django.contract import ClaimRequest, InstanceState, JobRecord, JobState
from millrace_django.engine import JobContext, outcomes
from millrace_django.engine.errors import NotConfigured
from millrace_django.engine.job_context import SideEffects
from millrace_django.engine.workflow import targets
from millrace_django.testing import JobRunner
from tests.unit.workflow import flows


def test_the_facade_uses_the_installed_client(runner: JobRunner) -> None:
    with runner.installed():
        instance_id = workflows.start(flows.WAIT_FIRST, {"order_id": "f-1"})
        assert workflows.get(instance_id) is not None
        assert millrace_django.signal("approval", "f-1", flows.Approval(True, "me"))
        runner.run_until_idle()
        assert workflows.data(instance_id)["shipped"] is True
        assert workflows.data(instance_id, flows.Order) == flows.Order(order_id="f-1")
        assert workflows.position(instance_id).state is InstanceState.COMPLETED
        assert [s.id for s in workflows.instances().items] == [instance_id]
        assert workflows.graph("t-wait-first")["start"] == "sig1"
        other = workflows.start("t-linear")
        assert workflows.cancel(other)
        assert workflows.recover(other, "retry") is False
    assert millrace_django.workflows is workflows


def test_the_facade_needs_a_configured_client() -> None:
    from millrace_django.engine import set_default_client

    previous = set_default_client(None)
    try:
        with pytest.raises(NotConfigured):
            workflows.start(flows.LINEAR)
    finally:
        set_default_client(previous)


def _claimed(runner: JobRunner) -> JobRecord:
    (job,) = runner.storage.claim(
        ClaimRequest(
            worker_id="w", queues=frozenset({"default"}), max_count=1, lease=timedelta(minutes=1)
        )
    )
    return job


def test_a_dead_workflow_job_brings_its_failure_handler_in_the_same_transition(
    runner: JobRunner,
) -> None:
    instance_id = runner.workflows.start(flows.LINEAR)
    job = _claimed(runner)
    dead = outcomes.failed(job, RuntimeError("x"), clock=runner.clock, config=runner.config)
    assert dead.target is JobState.DEAD
    (handler,) = dead.enqueue
    assert handler.invocation.target == targets.FAIL
    assert handler.invocation.args == (str(instance_id), str(job.id))
    assert (handler.queue, handler.workflow_instance_id) == (job.queue, instance_id)
    poisoned = replace(job, attempt=job.failures + runner.config.interruption_limit + 1)
    verdict = outcomes.before_run(poisoned, clock=runner.clock, config=runner.config)
    assert verdict is not None and verdict.target is JobState.DEAD
    assert [j.invocation.target for j in verdict.enqueue] == [targets.FAIL]


def test_a_plain_job_or_a_dying_failure_handler_brings_no_handler(runner: JobRunner) -> None:
    from tests.unit.engine import sample_jobs

    with runner.installed():
        sample_jobs.add.enqueue(1, 2)
    job = _claimed(runner)
    dead = outcomes.failed(job, RuntimeError("x"), clock=runner.clock, config=runner.config)
    assert dead.enqueue == []
    handler = replace(
        job,
        invocation=replace(job.invocation, target=targets.FAIL),
        workflow_instance_id=job.id,
    )
    dead = outcomes.failed(handler, RuntimeError("x"), clock=runner.clock, config=runner.config)
    assert dead.enqueue == []


def test_side_effects_ride_only_on_a_success(runner: JobRunner) -> None:
    runner.workflows.start(flows.LINEAR)
    job = _claimed(runner)
    context = JobContext.for_job(job, runner.clock, storage=runner.storage)
    follower = replace(job, id=job.id.__class__(int=job.id.int + 1), state=JobState.ENQUEUED)
    context.ride_on_success(SideEffects(enqueue=[follower]))
    success = outcomes.succeeded(
        job, None, clock=runner.clock, config=runner.config, effects=context.side_effects
    )
    assert list(success.enqueue) == [follower]
    assert context.storage is runner.storage and context.clock is runner.clock
