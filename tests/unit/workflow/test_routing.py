"""Every node kind on the memory provider, run by the JobRunner."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

import pytest

from millrace_django.contract import InstanceState, JobState, Limit, queue_scope
from millrace_django.engine import EngineSettings, Retry
from millrace_django.engine.errors import UnknownQueue
from millrace_django.engine.workflow import (
    InvalidWorkflowData,
    Step,
    Workflow,
    WorkflowClient,
    targets,
    unregister,
)
from millrace_django.testing import JobFailed, JobRunner
from tests.unit.workflow import flows


def test_a_linear_workflow_runs_each_activity_as_a_job_in_order(
    runner: JobRunner, workflows: WorkflowClient
) -> None:
    instance_id = workflows.start(flows.LINEAR, {"order": 1})
    assert runner.run_until_idle() == 3
    assert flows.calls == ["first", "second", "third"]
    instance = runner.assert_instance(instance_id, InstanceState.COMPLETED)
    assert instance.data == {"order": 1, "trail": ["first", "second", "third"]}
    jobs = runner.jobs()
    assert [j.activity_node_id for j in jobs] == ["a1", "a2", "a3"]
    assert all(j.workflow_instance_id == instance_id for j in jobs)
    assert all(j.invocation.target == targets.RUN for j in jobs)
    assert instance.revision == 4  # created, then one checkpoint per activity


def test_starting_stores_the_instance_and_its_first_job_together(
    runner: JobRunner, workflows: WorkflowClient
) -> None:
    instance_id = workflows.start(flows.LINEAR)
    instance = runner.assert_instance(instance_id, InstanceState.RUNNING)
    assert (instance.revision, instance.data) == (1, {})
    (first_job,) = runner.jobs()
    assert first_job.state is JobState.ENQUEUED
    assert workflows.position(instance_id).running == ("a1",)


def test_start_many_starts_one_instance_per_item_and_each_runs_through(
    runner: JobRunner, workflows: WorkflowClient
) -> None:
    ids = workflows.start_many(flows.LINEAR, [{"order": n} for n in range(3)])

    assert len(set(ids)) == 3
    assert runner.run_until_idle() == 9
    for n, instance_id in enumerate(ids):
        instance = runner.assert_instance(instance_id, InstanceState.COMPLETED)
        assert instance.data == {"order": n, "trail": ["first", "second", "third"]}


def test_start_many_with_one_bad_item_starts_none(
    runner: JobRunner, workflows: WorkflowClient
) -> None:
    with pytest.raises(InvalidWorkflowData):
        workflows.start_many(flows.LINEAR, [{"order": 1}, [2]])

    assert runner.jobs() == []
    assert workflows.start_many(flows.LINEAR, []) == []


def test_data_may_be_a_dataclass_and_read_back_as_one(
    runner: JobRunner, workflows: WorkflowClient
) -> None:
    instance_id = workflows.start(flows.LINEAR, flows.Order(order_id="o-7", amount=3))
    runner.run_until_idle()
    assert workflows.data(instance_id, flows.Order) == flows.Order(order_id="o-7", amount=3)
    assert workflows.data(instance_id)["trail"] == ["first", "second", "third"]


@dataclass
class NotJson:
    when: object


@pytest.mark.parametrize(
    ("data", "message"), [([1], "a dict or a dataclass"), ({"t": {1, 2}}, "is a set")]
)
def test_data_that_is_not_a_json_object_is_refused_and_nothing_starts(
    runner: JobRunner, workflows: WorkflowClient, data: object, message: str
) -> None:
    with pytest.raises(InvalidWorkflowData, match=message):
        workflows.start(flows.LINEAR, data)
    assert runner.jobs() == []


def test_an_activity_leaving_non_json_data_fails_its_step(runner: JobRunner) -> None:
    instance_id = runner.workflows.start(flows.LINEAR, {"x": 1})
    job = runner.jobs()[0]
    # Make the first step store a set: simulate by a definition whose activity does.
    from tests.unit.workflow import bad_flows

    bad_id = runner.workflows.start(bad_flows.BAD_DATA)
    with pytest.raises(JobFailed, match="left data that is not JSON"):
        runner.run_until_idle()
    runner.run_until_idle(throw_on_failure=False)
    runner.assert_instance(bad_id, InstanceState.FAILED)
    runner.assert_succeeded(job.id)
    runner.assert_instance(instance_id, InstanceState.COMPLETED)


@pytest.mark.parametrize(("amount", "taken"), [(500, "big"), (5, "small")])
def test_if_routes_on_the_data_without_spending_a_job(
    runner: JobRunner, workflows: WorkflowClient, amount: int, taken: str
) -> None:
    instance_id = workflows.start(flows.BRANCHING, {"amount": amount})
    assert runner.run_until_idle() == 2  # the If itself spent no job
    assert flows.calls == [taken, "first"]
    instance = runner.assert_instance(instance_id, InstanceState.COMPLETED)
    assert instance.data["path"] == taken
    position = workflows.position(instance_id)
    assert "if1" in position.done
    assert ("a1" if taken == "big" else "a2") in position.done


def test_an_if_without_else_carries_on_after_it(
    runner: JobRunner, workflows: WorkflowClient
) -> None:
    workflows.start(flows.IF_WITHOUT_ELSE, {"flag": False})
    workflows.start(flows.IF_WITHOUT_ELSE, {"flag": True})
    runner.run_until_idle()
    assert sorted(flows.calls) == ["big", "first", "first"]


def test_parallel_branches_all_run_and_join_before_the_next_step(
    runner: JobRunner, workflows: WorkflowClient
) -> None:
    instance_id = workflows.start(flows.FANOUT)
    position = workflows.position(instance_id)
    assert set(position.running) == {"a1", "a2", "a4"}
    runner.run_until_idle()
    assert flows.calls[-1] == "after"
    assert sorted(flows.calls[:-1]) == ["first", "left", "middle", "right"]
    assert flows.calls.index("middle") < flows.calls.index("first")
    instance = runner.assert_instance(instance_id, InstanceState.COMPLETED)
    assert instance.data["after"] == ["left", "middle", "right"]
    assert set(workflows.position(instance_id).done) == {"par1", "a1", "a2", "a3", "a4", "a5"}


def test_for_each_runs_the_body_once_per_item_with_its_index(
    runner: JobRunner, workflows: WorkflowClient
) -> None:
    instance_id = workflows.start(flows.FOR_EACH, {"lines": [1, 2, 3, 4]})
    runner.run_until_idle()
    assert sorted(flows.calls[:-1]) == ["line[0]", "line[1]", "line[2]", "line[3]"]
    assert flows.calls[-1] == "total"
    instance = runner.assert_instance(instance_id, InstanceState.COMPLETED)
    assert instance.data["processed"] == {"0": 10, "1": 20, "2": 30, "3": 40}
    assert instance.data["total"] == 100


def test_for_each_over_an_empty_list_skips_the_body(
    runner: JobRunner, workflows: WorkflowClient
) -> None:
    instance_id = workflows.start(flows.FOR_EACH, {"lines": []})
    runner.run_until_idle()
    assert flows.calls == ["total"]
    runner.assert_instance(instance_id, InstanceState.COMPLETED)


def test_an_instance_whose_only_step_is_skipped_completes_at_start(
    runner: JobRunner, workflows: WorkflowClient
) -> None:
    instance_id = workflows.start(flows.EMPTY_START, {"lines": []})
    runner.assert_instance(instance_id, InstanceState.COMPLETED)
    assert runner.jobs() == []


def test_a_for_each_collection_that_is_not_a_list_fails_the_start(
    runner: JobRunner, workflows: WorkflowClient
) -> None:
    from millrace_django.engine.workflow import WorkflowStepError

    with pytest.raises(WorkflowStepError, match="not a list"):
        workflows.start(flows.FOR_EACH, {"lines": "abc"})
    with pytest.raises(WorkflowStepError, match="has no 'lines'"):
        workflows.start(flows.FOR_EACH, {})


def test_forks_nest_inside_for_each_items(runner: JobRunner, workflows: WorkflowClient) -> None:
    instance_id = workflows.start(flows.NESTED_FORKS, {"lines": [1, 2, 3]})
    runner.run_until_idle()
    assert sorted(flows.calls[:-1]) == [
        "line[0]",
        "line[1]",
        "line[2]",
        "plain[0]",
        "plain[1]",
        "plain[2]",
    ]
    instance = runner.assert_instance(instance_id, InstanceState.COMPLETED)
    assert instance.data["total"] == 60


def test_activities_may_be_classes_or_coroutines(
    runner: JobRunner, workflows: WorkflowClient
) -> None:
    instance_id = workflows.start(flows.CLASSES_AND_ASYNC)
    runner.run_until_idle()
    instance = runner.assert_instance(instance_id, InstanceState.COMPLETED)
    assert instance.data == {"tally": 1, "async": True}


def test_a_delay_is_a_durable_timer(runner: JobRunner, workflows: WorkflowClient) -> None:
    instance_id = workflows.start(flows.DELAYED)
    runner.run_until_idle()
    assert flows.calls == ["first"]
    (timer,) = runner.jobs(JobState.SCHEDULED)
    assert timer.due_at == runner.clock.now() + timedelta(hours=1)
    assert workflows.position(instance_id).waiting == ("delay1",)
    runner.assert_instance(instance_id, InstanceState.RUNNING)
    runner.advance(timedelta(minutes=59))
    runner.run_until_idle()
    assert flows.calls == ["first"]
    runner.advance(timedelta(minutes=1))
    runner.run_until_idle()
    assert flows.calls == ["first", "second"]
    runner.assert_instance(instance_id, InstanceState.COMPLETED)


def test_a_step_retries_by_its_own_policy(runner: JobRunner, workflows: WorkflowClient) -> None:
    instance_id = workflows.start(flows.RETRIED, {"fail": {"flaky": 2}})
    runner.run_until_idle()
    assert flows.calls == ["flaky"]
    runner.advance(timedelta(seconds=10))
    runner.run_until_idle()
    runner.advance(timedelta(seconds=10))
    runner.run_until_idle()
    assert flows.calls == ["flaky", "flaky", "flaky", "second"]
    instance = runner.assert_instance(instance_id, InstanceState.COMPLETED)
    assert instance.data["flaky_attempts"] == 3
    flaky_job = next(j for j in runner.jobs() if j.activity_node_id == "a1")
    assert flaky_job.retry.max_attempts == 3
    assert flaky_job.failures == 2


def test_a_failing_activity_checkpoints_nothing_and_retries_on_the_original_data(
    runner: JobRunner, workflows: WorkflowClient
) -> None:
    instance_id = workflows.start(flows.RETRIED, {"fail": {"flaky": 1}})
    runner.run_until_idle()
    instance = runner.assert_instance(instance_id, InstanceState.RUNNING)
    assert "flaky_attempts" not in instance.data
    assert instance.revision == 1


def test_a_failed_step_outside_a_saga_fails_the_instance(
    runner: JobRunner, workflows: WorkflowClient
) -> None:
    instance_id = workflows.start(flows.LINEAR, {"fail": {"second": "always"}})
    with pytest.raises(JobFailed, match="second failed"):
        runner.run_until_idle()
    runner.run_until_idle()  # the failure handler
    instance = runner.assert_instance(instance_id, InstanceState.FAILED)
    assert instance.failed_node == "a2"
    assert instance.error is not None and "second failed" in instance.error
    assert flows.calls == ["first", "second"]
    handler = runner.jobs()[-1]
    assert handler.invocation.target == targets.FAIL
    assert workflows.position(instance_id).failed == ("a2",)


def test_jobs_go_to_the_workflow_queue_or_the_step_queue(runner: JobRunner) -> None:
    workflow = Workflow("t-queues", queue="side", steps=[Step(flows.first, queue="default")])
    try:
        runner.workflows.start(workflow)
        (job,) = runner.jobs()
        assert job.queue == "default"
        assert workflow.queue == "side"
        other = Workflow("t-queues-bad", steps=[Step(flows.first, queue="nowhere")])
        try:
            with pytest.raises(UnknownQueue, match="nowhere"):
                runner.workflows.start(other)
        finally:
            unregister(other)
    finally:
        unregister(workflow)


def test_starting_by_id_uses_the_latest_version_and_a_pinned_one_on_request(
    runner: JobRunner, workflows: WorkflowClient
) -> None:
    latest = workflows.start("t-versioned")
    pinned = workflows.start("t-versioned", version=1)
    runner.run_until_idle()
    assert runner.assert_instance(latest, InstanceState.COMPLETED).version == 2
    assert runner.assert_instance(pinned, InstanceState.COMPLETED).version == 1
    assert sorted(flows.calls) == ["first", "second", "third"]


def test_an_instance_finishes_on_the_version_it_started_on(
    runner: JobRunner, workflows: WorkflowClient
) -> None:
    # v1 started; then "deployed" v3 while it runs: the instance keeps v1's graph.
    instance_id = workflows.start("t-versioned", version=1)
    v3 = Workflow("t-versioned", version=3, steps=[Step(flows.third)])
    try:
        runner.run_until_idle()
        assert flows.calls == ["first"]
        assert runner.assert_instance(instance_id, InstanceState.COMPLETED).version == 1
        assert workflows.start("t-versioned") and runner.run_until_idle() == 1
        assert flows.calls == ["first", "third"]
    finally:
        unregister(v3)


def test_an_instance_of_a_version_no_longer_defined_fails_with_a_clear_error(
    runner: JobRunner, workflows: WorkflowClient
) -> None:
    gone = Workflow("t-gone", version=1, steps=[Step(flows.first), Step(flows.second)])
    instance_id = workflows.start(gone)
    unregister(gone)
    with pytest.raises(JobFailed, match="workflow 't-gone' is not defined"):
        runner.run_until_idle()
    runner.run_until_idle()
    instance = runner.assert_instance(instance_id, InstanceState.FAILED)
    assert instance.error is not None and "'t-gone' is not defined" in instance.error


def test_the_runner_lists_instances_newest_first(
    runner: JobRunner, workflows: WorkflowClient
) -> None:
    one = workflows.start(flows.LINEAR)
    runner.clock.advance(timedelta(seconds=1))
    two = workflows.start(flows.BRANCHING, {"amount": 1})
    runner.clock.advance(timedelta(seconds=1))
    three = workflows.start(flows.LINEAR)
    assert [s.id for s in workflows.list().items] == [three, two, one]
    assert [s.id for s in workflows.list(definition=flows.LINEAR).items] == [three, one]
    runner.run_until_idle()
    page = workflows.list(states=[InstanceState.COMPLETED], limit=2)
    assert [s.id for s in page.items] == [three, two]
    assert page.next_cursor is not None
    rest = workflows.list(states=[InstanceState.COMPLETED], limit=2, cursor=page.next_cursor)
    assert [s.id for s in rest.items] == [one]


def test_a_workflows_jobs_carry_the_limits_of_their_queue() -> None:
    limit = Limit(scope=queue_scope("default"), concurrency=2)
    runner = JobRunner(
        config=EngineSettings(
            queues=frozenset({"default", "side"}),
            default_retry=Retry.none(),
            queue_limits={"default": limit},
        )
    )
    instance_id = runner.workflows.start(flows.LINEAR, {"order": 1})

    (first,) = runner.jobs()
    assert first.limits == (limit,)
    assert runner.run_until_idle() == 3
    runner.assert_instance(instance_id, InstanceState.COMPLETED)
    assert [job.limits for job in runner.jobs()] == [(limit,)] * 3
