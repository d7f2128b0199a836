"""The sample project's order-approval workflow, end to end on the test runner."""

from __future__ import annotations

from datetime import timedelta

import pytest

from millrace_django.contract import InstanceState
from millrace_django.engine import EngineSettings, Retry
from millrace_django.engine.workflow import InvalidSignalPayload
from millrace_django.testing import JobRunner
from testproject import workflows as sample


@pytest.fixture
def runner() -> JobRunner:
    return JobRunner(config=EngineSettings(default_retry=Retry.none()))


def test_an_approved_order_is_charged_notified_and_closed(runner: JobRunner) -> None:
    with runner.installed():
        instance_id = sample.start_order("o-1", 50)
        runner.run_until_idle()
        runner.assert_instance(instance_id, InstanceState.SUSPENDED)
        assert sample.approve("o-1")
        runner.run_until_idle()
    data = runner.assert_instance(instance_id, InstanceState.COMPLETED).data
    assert data["payment"] == "P-o-1"
    assert data["customer_notified"] is True
    assert data["status"] == "closed"


def test_a_refused_order_releases_its_stock(runner: JobRunner) -> None:
    with runner.installed():
        instance_id = sample.start_order("o-2", 50)
        runner.run_until_idle()
        assert sample.approve("o-2", approved=False)
        runner.run_until_idle(throw_on_failure=False)
    instance = runner.assert_instance(instance_id, InstanceState.COMPENSATED)
    assert instance.data["stock_released"] is True
    assert "payment" not in instance.data
    assert instance.failed_node == "a3"  # check_approval


def test_an_order_nobody_approves_times_out_and_releases_its_stock(runner: JobRunner) -> None:
    with runner.installed():
        instance_id = sample.start_order("o-3", 50)
        runner.run_until_idle()
        runner.advance(sample.APPROVAL_TIMEOUT)
        runner.run_until_idle(throw_on_failure=False)
        assert sample.approve("o-3") is False
    instance = runner.assert_instance(instance_id, InstanceState.COMPENSATED)
    assert instance.data["approval"]["note"] == "timed out"  # type: ignore[index,call-overload]


def test_a_declined_charge_unwinds_the_saga(runner: JobRunner) -> None:
    with runner.installed():
        instance_id = sample.start_order("big", 20_000)
        runner.run_until_idle()
        sample.approve("big")
        runner.run_until_idle(throw_on_failure=False)
    instance = runner.assert_instance(instance_id, InstanceState.COMPENSATED)
    assert instance.data["stock_released"] is True
    assert "status" not in instance.data


def test_the_approval_payload_is_checked(runner: JobRunner) -> None:
    with runner.installed():
        sample.start_order("o-4", 50)
        runner.run_until_idle()
        with pytest.raises(InvalidSignalPayload, match="missing 'approver'"):
            from millrace_django import workflows

            workflows.signal(sample.APPROVAL_SIGNAL, "o-4", {"approved": True})
        assert sample.approve("o-4")


def test_the_demo_starts_one_approved_and_one_waiting_order(runner: JobRunner) -> None:
    with runner.installed():
        started = sample.start_demo()
        runner.run_until_idle()
        runner.advance(timedelta(seconds=2))  # the auto-approval job is due
        runner.run_until_idle()
        runner.assert_instance(started["demo-approved"], InstanceState.COMPLETED)
        runner.assert_instance(started["demo-waiting"], InstanceState.SUSPENDED)
        position = runner.workflows.position(started["demo-waiting"])
        assert position.waiting == ("sig1",)
        assert sample.approve("demo-waiting")
        runner.run_until_idle()
        runner.assert_instance(started["demo-waiting"], InstanceState.COMPLETED)


def test_the_auto_approval_job_retries_until_the_order_waits(runner: JobRunner) -> None:
    from millrace_django.contract import JobState

    with runner.installed():
        job_id = sample.auto_approve.enqueue("not-started")
        runner.run_until_idle()
        assert runner.get(job_id).state is JobState.FAILED
        instance_id = sample.start_order("not-started", 10)
        runner.run_until_idle()
        runner.advance(timedelta(seconds=1))
        runner.run_until_idle()
        runner.assert_succeeded(job_id)
        runner.assert_instance(instance_id, InstanceState.COMPLETED)
