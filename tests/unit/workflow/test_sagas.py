"""Sagas: compensation newest-first, failure policies, nesting, and operator recovery."""

from __future__ import annotations

from datetime import timedelta

import pytest

from millrace_django.contract import InstanceState, RetryKind
from millrace_django.engine import EngineSettings, Retry
from millrace_django.engine.workflow import Recovery, WorkflowClient
from millrace_django.testing import JobRunner
from tests.unit.workflow import flows

DO = ["first", "book_hotel", "book_flight", "charge_card"]


def run(runner: JobRunner) -> None:
    """Run until idle, through the failures the test arranged."""
    runner.run_until_idle(throw_on_failure=False)


def test_a_saga_that_succeeds_compensates_nothing(
    runner: JobRunner, workflows: WorkflowClient
) -> None:
    instance_id = workflows.start(flows.TRIP)
    run(runner)
    assert flows.calls == [*DO, "second"]
    runner.assert_instance(instance_id, InstanceState.COMPLETED)


def test_a_failed_saga_step_compensates_the_completed_steps_newest_first(
    runner: JobRunner, workflows: WorkflowClient
) -> None:
    instance_id = workflows.start(flows.TRIP, {"fail": {"charge_card": "always"}})
    run(runner)
    assert flows.calls == [*DO, "cancel_flight", "cancel_hotel"]
    instance = runner.assert_instance(instance_id, InstanceState.COMPENSATED)
    assert instance.data["cancel_hotel"] is True
    assert instance.failed_node == "a4"
    assert "charge_card failed" in (instance.error or "")
    position = workflows.position(instance_id)
    assert "a5" not in position.done  # nothing after the saga ran


def test_a_compensated_instance_marks_the_step_that_failed_in_its_position(
    runner: JobRunner, workflows: WorkflowClient
) -> None:
    instance_id = workflows.start(flows.TRIP, {"fail": {"charge_card": "always"}})
    run(runner)
    runner.assert_instance(instance_id, InstanceState.COMPENSATED)
    position = workflows.position(instance_id)
    assert position.failed == ("a4",)
    assert position.to_json()["failed"] == ["a4"]


def test_compensation_starts_only_once_the_step_exhausted_its_retries() -> None:
    runner = JobRunner(config=EngineSettings(default_retry=Retry.fixed(timedelta(seconds=1), 2)))
    instance_id = runner.workflows.start(flows.TRIP, {"fail": {"book_flight": "always"}})
    run(runner)
    assert flows.calls == ["first", "book_hotel", "book_flight"]
    runner.assert_instance(instance_id, InstanceState.RUNNING)
    runner.advance(timedelta(seconds=1))
    run(runner)
    assert flows.calls == ["first", "book_hotel", "book_flight", "book_flight", "cancel_hotel"]
    runner.assert_instance(instance_id, InstanceState.COMPENSATED)


def test_policy_compensate_unwinds_at_the_first_failure_without_retries() -> None:
    runner = JobRunner(config=EngineSettings(default_retry=Retry.fixed(timedelta(seconds=1), 5)))
    instance_id = runner.workflows.start(
        flows.POLICY_COMPENSATE, {"fail": {"charge_card": "always"}}
    )
    run(runner)
    assert flows.calls == ["book_hotel", "charge_card", "cancel_hotel"]
    runner.assert_instance(instance_id, InstanceState.COMPENSATED)
    charge = next(j for j in runner.jobs() if j.activity_node_id == "a2")
    assert charge.retry.kind is RetryKind.NONE


def test_policy_terminate_fails_the_instance_and_keeps_the_work_done(
    runner: JobRunner, workflows: WorkflowClient
) -> None:
    instance_id = workflows.start(flows.POLICY_TERMINATE, {"fail": {"charge_card": "always"}})
    run(runner)
    assert flows.calls == ["book_hotel", "charge_card"]
    instance = runner.assert_instance(instance_id, InstanceState.FAILED)
    assert instance.data["book_hotel"] is True


def test_policy_suspend_waits_for_an_operator_who_may_retry(
    runner: JobRunner, workflows: WorkflowClient
) -> None:
    flows.broken.add("charge_card")
    instance_id = workflows.start(flows.POLICY_SUSPEND)
    run(runner)
    instance = runner.assert_instance(instance_id, InstanceState.SUSPENDED)
    (stuck,) = instance.stuck
    assert (stuck.kind, stuck.node) == ("step", "a2")
    assert stuck.error is not None and "charge_card is broken" in stuck.error
    assert workflows.position(instance_id).failed == ("a2",)
    flows.broken.clear()
    assert workflows.recover(instance_id, Recovery.RETRY)
    run(runner)
    assert flows.calls == ["book_hotel", "charge_card", "charge_card", "second"]
    runner.assert_instance(instance_id, InstanceState.COMPLETED)


def test_a_suspended_step_may_be_skipped(runner: JobRunner, workflows: WorkflowClient) -> None:
    flows.broken.add("charge_card")
    instance_id = workflows.start(flows.POLICY_SUSPEND)
    run(runner)
    assert workflows.recover(instance_id, "skip")
    run(runner)
    assert flows.calls == ["book_hotel", "charge_card", "second"]
    runner.assert_instance(instance_id, InstanceState.COMPLETED)


def test_a_suspended_step_may_be_abandoned(runner: JobRunner, workflows: WorkflowClient) -> None:
    flows.broken.add("charge_card")
    instance_id = workflows.start(flows.POLICY_SUSPEND)
    run(runner)
    assert workflows.recover(instance_id, Recovery.ABANDON)
    run(runner)
    assert flows.calls == ["book_hotel", "charge_card"]  # nothing compensated
    runner.assert_instance(instance_id, InstanceState.FAILED)


def test_suspend_works_outside_a_saga_too(runner: JobRunner, workflows: WorkflowClient) -> None:
    flows.broken.add("first")
    instance_id = workflows.start(flows.OUTSIDE_SAGA_SUSPEND)
    run(runner)
    runner.assert_instance(instance_id, InstanceState.SUSPENDED)
    flows.broken.clear()
    assert workflows.recover(instance_id, "retry")
    run(runner)
    runner.assert_instance(instance_id, InstanceState.COMPLETED)


def test_a_failed_compensation_suspends_the_instance(
    runner: JobRunner, workflows: WorkflowClient
) -> None:
    flows.broken.add("cancel_flight")
    instance_id = workflows.start(flows.TRIP, {"fail": {"charge_card": "always"}})
    run(runner)
    assert flows.calls == [*DO, "cancel_flight"]
    instance = runner.assert_instance(instance_id, InstanceState.SUSPENDED)
    (stuck,) = instance.stuck
    assert (stuck.kind, stuck.node) == ("compensation", "a3")
    assert workflows.position(instance_id).failed == ("a3",)
    assert "cancel_hotel" not in instance.data


def test_a_failed_compensation_retried_by_an_operator_finishes_the_unwind(
    runner: JobRunner, workflows: WorkflowClient
) -> None:
    flows.broken.add("cancel_flight")
    instance_id = workflows.start(flows.TRIP, {"fail": {"charge_card": "always"}})
    run(runner)
    flows.broken.clear()
    assert workflows.recover(instance_id, Recovery.RETRY)
    run(runner)
    assert flows.calls == [*DO, "cancel_flight", "cancel_flight", "cancel_hotel"]
    runner.assert_instance(instance_id, InstanceState.COMPENSATED)


def test_a_failed_compensation_skipped_by_an_operator_goes_on_with_the_next(
    runner: JobRunner, workflows: WorkflowClient
) -> None:
    flows.broken.add("cancel_flight")
    instance_id = workflows.start(flows.TRIP, {"fail": {"charge_card": "always"}})
    run(runner)
    assert workflows.recover(instance_id, Recovery.SKIP)
    run(runner)
    assert flows.calls == [*DO, "cancel_flight", "cancel_hotel"]
    instance = runner.assert_instance(instance_id, InstanceState.COMPENSATED)
    assert "cancel_flight" not in instance.data


def test_a_failed_compensation_abandoned_by_an_operator_fails_the_instance(
    runner: JobRunner, workflows: WorkflowClient
) -> None:
    flows.broken.add("cancel_flight")
    instance_id = workflows.start(flows.TRIP, {"fail": {"charge_card": "always"}})
    run(runner)
    assert workflows.recover(instance_id, Recovery.ABANDON)
    run(runner)
    assert flows.calls == [*DO, "cancel_flight"]
    instance = runner.assert_instance(instance_id, InstanceState.FAILED)
    assert "cancel_hotel" not in instance.data


def test_recovery_is_refused_unless_the_instance_is_suspended_on_a_failure(
    runner: JobRunner, workflows: WorkflowClient
) -> None:
    from uuid import uuid4

    running = workflows.start(flows.TRIP)
    assert workflows.recover(running, "retry") is False
    waiting = workflows.start(flows.WAIT_FIRST, {"order_id": "x"})
    assert workflows.recover(waiting, "retry") is False  # suspended, but only waiting
    assert workflows.recover(uuid4(), "retry") is False
    with pytest.raises(ValueError, match="'later'"):
        workflows.recover(running, "later")


def test_a_recovery_job_whose_failure_was_already_handled_does_nothing(
    runner: JobRunner, workflows: WorkflowClient
) -> None:
    flows.broken.add("cancel_flight")
    instance_id = workflows.start(flows.TRIP, {"fail": {"charge_card": "always"}})
    run(runner)
    assert workflows.recover(instance_id, Recovery.SKIP)
    assert workflows.recover(instance_id, Recovery.ABANDON)  # both queued
    run(runner)
    runner.assert_instance(instance_id, InstanceState.COMPENSATED)  # the first one won


def test_a_committed_nested_saga_with_unwind_is_compensated_by_the_outer_unwind(
    runner: JobRunner, workflows: WorkflowClient
) -> None:
    instance_id = workflows.start(flows.NESTED_UNWIND, {"fail": {"outer_last": "always"}})
    run(runner)
    assert flows.calls == [
        "book_hotel",
        "inner_one",
        "inner_two",
        "outer_last",
        "undo_inner_two",
        "undo_inner_one",
        "cancel_hotel",
    ]
    runner.assert_instance(instance_id, InstanceState.COMPENSATED)


def test_a_committed_nested_saga_with_keep_stays_done(
    runner: JobRunner, workflows: WorkflowClient
) -> None:
    instance_id = workflows.start(flows.NESTED_KEEP, {"fail": {"outer_last": "always"}})
    run(runner)
    assert flows.calls == ["book_hotel", "inner_one", "inner_two", "outer_last", "cancel_hotel"]
    runner.assert_instance(instance_id, InstanceState.COMPENSATED)


@pytest.mark.parametrize("workflow", [flows.NESTED_UNWIND, flows.NESTED_KEEP])
def test_an_inner_failure_unwinds_the_inner_saga_then_the_outer(
    runner: JobRunner, workflows: WorkflowClient, workflow: object
) -> None:
    instance_id = workflows.start(workflow, {"fail": {"inner_two": "always"}})  # type: ignore[arg-type]
    run(runner)
    assert flows.calls == [
        "book_hotel",
        "inner_one",
        "inner_two",
        "undo_inner_one",
        "cancel_hotel",
    ]
    runner.assert_instance(instance_id, InstanceState.COMPENSATED)


def test_a_failed_inner_compensation_suspends_the_whole_instance(
    runner: JobRunner, workflows: WorkflowClient
) -> None:
    flows.broken.add("undo_inner_one")
    instance_id = workflows.start(flows.NESTED_UNWIND, {"fail": {"inner_two": "always"}})
    run(runner)
    instance = runner.assert_instance(instance_id, InstanceState.SUSPENDED)
    assert [s.node for s in instance.stuck] == ["a2"]
    flows.broken.clear()
    assert workflows.recover(instance_id, Recovery.RETRY)
    run(runner)
    assert flows.calls[-2:] == ["undo_inner_one", "cancel_hotel"]
    runner.assert_instance(instance_id, InstanceState.COMPENSATED)


def test_a_saga_in_a_parallel_branch_unwinds_and_the_instance_is_compensated(
    runner: JobRunner, workflows: WorkflowClient
) -> None:
    instance_id = workflows.start(flows.SAGA_IN_PARALLEL, {"fail": {"charge_card": "always"}})
    run(runner)
    assert "cancel_hotel" in flows.calls
    assert "after" not in flows.calls
    runner.assert_instance(instance_id, InstanceState.COMPENSATED)
