"""Operator actions from the pages: through the engine, POST + CSRF, a clear message
that says why when the job is in the wrong state."""

from __future__ import annotations

from django.contrib.messages import get_messages
from django.test import Client
from django.urls import reverse

from millrace_django.contract import InstanceState, JobState
from millrace_django.testing import JobRunner
from tests.dashboard.sample import World


def act(client: Client, job_id, action: str, **data: str):
    return client.post(reverse("millrace_dashboard:job-action", args=[job_id, action]), data)


def said(response) -> list[str]:
    return [str(m) for m in get_messages(response.wsgi_request)]


class TestCancel:
    def test_cancels_a_waiting_job(self, operator: Client, world: World, runner: JobRunner):
        response = act(operator, world.enqueued, "cancel")
        assert response.status_code == 302
        assert response["Location"] == reverse("millrace_dashboard:job", args=[world.enqueued])
        assert said(response) == [f"Job {world.enqueued} cancelled."]
        runner.assert_state(world.enqueued, JobState.CANCELLED)

    def test_cancelling_a_parent_cancels_its_continuation(self, operator, world, runner):
        act(operator, world.parent, "cancel")
        runner.assert_state(world.awaiting, JobState.CANCELLED)

    def test_asks_a_running_job_to_stop(self, operator, world, runner):
        response = act(operator, world.processing, "cancel")
        assert "it is running, and its worker stops it" in said(response)[-1]
        record = runner.assert_state(world.processing, JobState.PROCESSING)
        assert record.cancel_requested

    def test_refuses_a_finished_job_and_says_why(self, operator, world, runner):
        response = act(operator, world.succeeded, "cancel")
        assert said(response) == [
            f"Job {world.succeeded} is already succeeded: only unfinished jobs can be cancelled."
        ]
        runner.assert_state(world.succeeded, JobState.SUCCEEDED)


class TestRunNow:
    def test_runs_a_failed_job_now(self, operator, world, runner):
        response = act(operator, world.failed, "run-now")
        assert "is enqueued to run now" in said(response)[-1]
        record = runner.assert_state(world.failed, JobState.ENQUEUED)
        assert record.failures == 1  # spends nothing

    def test_runs_a_delayed_job_before_its_time(self, operator, world, runner):
        response = act(operator, world.scheduled, "run-now")
        assert "is enqueued to run now" in said(response)[-1]
        record = runner.assert_state(world.scheduled, JobState.ENQUEUED)
        assert record.due_at is None

    def test_refuses_any_other_state_and_says_why(self, operator, world):
        response = act(operator, world.awaiting, "run-now")
        assert said(response) == [
            f"Job {world.awaiting} is awaiting: only a scheduled job, or a failed one waiting "
            "for its retry, can run now."
        ]


class TestRequeue:
    def test_mints_a_new_job_and_opens_it(self, operator, world, runner):
        response = act(operator, world.dead, "requeue")
        [new] = [j for j in runner.jobs() if j.requeued_from == world.dead]
        assert response["Location"] == reverse("millrace_dashboard:job", args=[new.id])
        assert said(response) == [f"Job {world.dead} requeued as job {new.id}."]
        assert new.state is JobState.ENQUEUED
        assert new.invocation == runner.get(world.dead).invocation
        runner.assert_state(world.dead, JobState.DEAD)

    def test_refuses_an_unfinished_job(self, operator, world, runner):
        response = act(operator, world.failed, "requeue")
        assert said(response) == [
            f"Job {world.failed} is failed: only finished jobs (succeeded, dead or cancelled) "
            "can be requeued."
        ]
        assert not [j for j in runner.jobs() if j.requeued_from == world.failed]


def test_an_unknown_job_is_reported(operator: Client, world: World):
    from uuid import uuid4

    missing = uuid4()
    assert said(act(operator, missing, "cancel")) == [f"There is no job {missing}."]


def test_an_unknown_action_is_404(operator: Client, world: World):
    assert act(operator, world.enqueued, "explode").status_code == 404


def test_next_returns_to_the_list_but_never_off_site(operator: Client, world: World):
    back = reverse("millrace_dashboard:jobs") + "?state=enqueued"
    assert act(operator, world.enqueued, "cancel", next=back)["Location"] == back
    away = act(operator, world.scheduled, "cancel", next="https://evil.example/")
    assert away["Location"] == reverse("millrace_dashboard:job", args=[world.scheduled])


class TestBulk:
    def test_cancels_the_selected_jobs_and_lists_refusals(self, operator, world, runner):
        response = operator.post(
            reverse("millrace_dashboard:jobs-bulk"),
            {
                "action": "cancel",
                "ids": [str(world.enqueued), str(world.scheduled), str(world.dead)],
            },
        )
        [message] = said(response)
        assert message.startswith("2 of 3 job(s) done.")
        assert f"Job {world.dead} is already dead" in message
        runner.assert_state(world.enqueued, JobState.CANCELLED)
        runner.assert_state(world.scheduled, JobState.CANCELLED)

    def test_requeues_in_bulk(self, operator, world, runner):
        operator.post(
            reverse("millrace_dashboard:jobs-bulk"),
            {"action": "requeue", "ids": [str(world.dead), str(world.succeeded)]},
        )
        assert {j.requeued_from for j in runner.jobs() if j.requeued_from} == {
            world.dead,
            world.succeeded,
        }

    def test_refuses_an_empty_or_malformed_selection(self, operator, world):
        path = reverse("millrace_dashboard:jobs-bulk")
        assert "Select at least one row." in said(operator.post(path, {"action": "cancel"}))[-1]
        assert (
            "Not a job or instance id."
            in said(operator.post(path, {"action": "cancel", "ids": ["nope"]}))[-1]
        )
        assert (
            "Select a valid choice"
            in said(operator.post(path, {"action": "explode", "ids": [str(world.enqueued)]}))[-1]
        )


class TestRecurring:
    def test_trigger_enqueues_one_occurrence_and_keeps_the_schedule(self, operator, world, runner):
        before = runner.storage.get_recurring(world.recurring_id)
        response = operator.post(
            reverse("millrace_dashboard:recurring-trigger", args=[world.recurring_id])
        )
        assert "one extra occurrence is enqueued" in said(response)[-1]
        fired = [j for j in runner.jobs(JobState.ENQUEUED) if j.recurring_id == world.recurring_id]
        assert len(fired) == 1
        assert runner.storage.get_recurring(world.recurring_id) == before

    def test_trigger_of_an_unknown_definition_says_so(self, operator, world):
        response = operator.post(reverse("millrace_dashboard:recurring-trigger", args=["nope/x"]))
        assert said(response) == ["There is no recurring job 'nope/x'."]

    def test_bulk_trigger(self, operator, world, runner):
        response = operator.post(
            reverse("millrace_dashboard:recurring-bulk"), {"ids": [world.recurring_id, "gone"]}
        )
        assert said(response)[-1].startswith("1 of 2 definition(s) done.")


class TestWorkflows:
    def instance_action(self, client: Client, instance_id, action: str, **data: str):
        return client.post(
            reverse("millrace_dashboard:instance-action", args=[instance_id, action]), data
        )

    def test_skip_answers_a_suspended_failure(self, operator, world, runner):
        response = self.instance_action(operator, world.suspended_instance, "skip")
        assert "Recovery 'skip'" in said(response)[-1]
        runner.run_until_idle()
        runner.assert_instance(world.suspended_instance, InstanceState.COMPLETED)

    def test_abandon_fails_the_instance(self, operator, world, runner):
        self.instance_action(operator, world.suspended_instance, "abandon")
        runner.run_until_idle(throw_on_failure=False)
        runner.assert_instance(world.suspended_instance, InstanceState.FAILED)

    def test_retry_names_the_failure(self, operator, world, runner):
        stuck = runner.workflows.get(world.suspended_instance).stuck[0]
        response = self.instance_action(
            operator, world.suspended_instance, "retry", job_id=str(stuck.job_id)
        )
        assert "Recovery 'retry'" in said(response)[-1]

    def test_recovery_of_an_instance_without_a_failure_says_why(self, operator, world):
        response = self.instance_action(operator, world.waiting_instance, "retry")
        assert said(response) == [
            f"Workflow instance {world.waiting_instance} is suspended: only a suspended "
            "instance with a failure can be recovered."
        ]

    def test_cancel_an_instance(self, operator, world, runner):
        response = self.instance_action(operator, world.waiting_instance, "cancel")
        assert "cancelled" in said(response)[-1]
        runner.assert_instance(world.waiting_instance, InstanceState.CANCELLED)
        again = self.instance_action(operator, world.waiting_instance, "cancel")
        assert "is cancelled (finished): only an unfinished instance" in said(again)[-1]

    def test_an_unknown_recovery_action_is_refused(self, operator, world):
        response = self.instance_action(operator, world.suspended_instance, "rewind")
        assert said(response)[-1].startswith("Unknown action 'rewind'")

    def test_bulk_cancel_instances(self, operator, world, runner):
        response = operator.post(
            reverse("millrace_dashboard:instances-bulk"),
            {
                "action": "cancel",
                "ids": [str(world.waiting_instance), str(world.suspended_instance)],
            },
        )
        assert said(response)[-1] == "2 of 2 instance(s) done."
        runner.assert_instance(world.waiting_instance, InstanceState.CANCELLED)


class TestSignals:
    def test_a_signal_resumes_the_waiting_instance(self, operator, world, runner):
        response = operator.post(
            reverse("millrace_dashboard:signals"),
            {"name": "approved", "correlation_id": world.order_id, "payload": '{"by": "ops"}'},
        )
        assert response.status_code == 302
        assert said(response) == [
            "Signal 'approved' delivered to the instance waiting on correlation id 'order-1001'."
        ]
        runner.run_until_idle()
        done = runner.assert_instance(world.waiting_instance, InstanceState.COMPLETED)
        assert done.data["approval"] == {"by": "ops"}

    def test_a_signal_nobody_waits_for_is_a_404_with_the_reason(self, operator, world):
        response = operator.post(
            reverse("millrace_dashboard:signals"), {"name": "approved", "correlation_id": "zzz"}
        )
        assert response.status_code == 404
        assert "No workflow instance is waiting for signal" in response.content.decode()

    def test_a_payload_that_is_not_json_is_a_form_error(self, operator, world, runner):
        response = operator.post(
            reverse("millrace_dashboard:signals"),
            {"name": "approved", "correlation_id": world.order_id, "payload": "{oops"},
        )
        assert response.status_code == 400
        assert "Not valid JSON" in response.content.decode()
        runner.assert_instance(world.waiting_instance, InstanceState.SUSPENDED)
