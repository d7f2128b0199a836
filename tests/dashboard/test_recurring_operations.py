"""Operating recurring definitions from the pages and the API: disable, enable, edit,
delete; the same permission as Trigger, an audit line per action, and bad input refused
with a message (a 400, nothing stored changed), never a 500."""

from __future__ import annotations

import logging
from dataclasses import replace

import pytest
from django.test import Client
from django.urls import reverse

from millrace_django.testing import JobRunner
from tests.dashboard.sample import World
from tests.dashboard.test_actions import said
from tests.dashboard.test_api import post

AUDIT = "millrace_django.audit"


def act(client: Client, recurring_id: str, action: str):
    url = reverse("millrace_dashboard:recurring-action", args=[recurring_id, action])
    return client.post(url)


def edit_page(client: Client, recurring_id: str, **data: str):
    url = reverse("millrace_dashboard:recurring-edit", args=[recurring_id])
    return client.post(url, data) if data else client.get(url)


class TestPages:
    def test_disable_then_enable_from_the_list(self, operator, world, runner, caplog):
        caplog.set_level(logging.INFO, logger=AUDIT)

        response = act(operator, world.recurring_id, "disable")

        assert "disabled: it does not fire until it is enabled" in said(response)[-1]
        assert runner.storage.get_recurring(world.recurring_id).enabled is False
        page = operator.get(reverse("millrace_dashboard:recurring")).content.decode()
        assert ">disabled</span>" in page and ">Enable</button>" in page
        logged = caplog.records[-1].getMessage()
        assert logged.startswith("operator disable nightly-cleanup: 200 Recurring job")

        act(operator, world.recurring_id, "enable")

        assert runner.storage.get_recurring(world.recurring_id).enabled is True
        assert caplog.records[-1].millrace_action == "enable"  # type: ignore[attr-defined]

    def test_the_edit_page_saves_a_new_schedule_and_arguments(self, operator, world, runner):
        assert 'value="0 3 * * *"' in edit_page(operator, world.recurring_id).content.decode()

        response = edit_page(
            operator, world.recurring_id, cron="15 4 * * 1", timezone="UTC", args="[]", kwargs=""
        )

        assert response.status_code == 302
        assert "saved" in said(response)[-1]
        stored = runner.storage.get_recurring(world.recurring_id)
        assert (stored.cron, stored.timezone) == ("15 4 * * 1", "UTC")
        assert stored.next_fire_time.weekday() == 0

    @pytest.mark.parametrize(
        ("data", "shown"),
        [
            ({"cron": "0 25 * * *"}, "out of range"),
            ({"timezone": "Mars/Olympus"}, "Mars/Olympus"),
            ({"args": "[1, 2]"}, "nightly_cleanup"),
            ({"args": "{not json"}, "JSON"),
            ({"kwargs": "[1]"}, "Give a JSON object"),
        ],
    )
    def test_a_bad_edit_is_a_form_error_and_changes_nothing(
        self, operator, world, runner, data, shown
    ):
        before = runner.storage.get_recurring(world.recurring_id)
        fields = {"cron": "0 3 * * *", "timezone": "Europe/Paris", "args": "[]", "kwargs": "{}"}

        response = edit_page(operator, world.recurring_id, **(fields | data))

        assert response.status_code == 400
        assert 'class="errorlist' in response.content.decode()
        assert shown in response.content.decode()
        assert runner.storage.get_recurring(world.recurring_id) == before

    def test_delete_removes_the_definition_and_keeps_its_jobs(self, operator, world, runner):
        response = act(operator, world.recurring_id, "delete")

        assert response["Location"] == reverse("millrace_dashboard:recurring")
        assert runner.storage.get_recurring(world.recurring_id) is None
        assert runner.storage.get_job(world.fired) is not None
        assert edit_page(operator, world.recurring_id).status_code == 404

    def test_an_unknown_definition_or_action_is_refused(self, operator, world):
        assert said(act(operator, "nope/x", "disable")) == ["There is no recurring job 'nope/x'."]
        assert act(operator, world.recurring_id, "explode").status_code == 404

    def test_a_viewer_may_not_operate_definitions(self, viewer, world, runner):
        for action in ("disable", "delete"):
            assert act(viewer, world.recurring_id, action).status_code == 404
        assert edit_page(viewer, world.recurring_id).status_code == 404
        assert edit_page(viewer, world.recurring_id, cron="* * * * *").status_code == 404
        assert runner.storage.get_recurring(world.recurring_id).enabled is True


class TestApi:
    def test_disable_enable_and_delete(self, operator: Client, world: World, runner: JobRunner):
        path = f"/recurring/{world.recurring_id}"

        assert post(operator, f"{path}/disable").status_code == 200
        listed = operator.get("/admin/millrace/api/v1/recurring").json()["items"]
        assert [item["enabled"] for item in listed] == [False]
        assert post(operator, f"{path}/enable").status_code == 200
        assert runner.storage.get_recurring(world.recurring_id).enabled is True
        assert post(operator, f"{path}/delete").status_code == 200
        assert post(operator, f"{path}/delete").status_code == 404
        assert post(operator, f"{path}/explode").status_code == 404

    def test_an_edit_changes_what_it_names(self, operator, world, runner):
        response = post(operator, f"/recurring/{world.recurring_id}/edit", {"cron": "*/5 * * * *"})

        assert response.status_code == 200, response.content
        stored = runner.storage.get_recurring(world.recurring_id)
        assert (stored.cron, stored.timezone) == ("*/5 * * * *", "Europe/Paris")

    @pytest.mark.parametrize(
        ("body", "field"),
        [
            ({"cron": "every day"}, "cron"),
            ({"timezone": "Nowhere/City"}, "timezone"),
            ({"args": ["surplus"]}, "arguments"),
            ({"kwargs": {"context": 1}}, "arguments"),
            ({"cron": 5}, "cron"),
            ({"kwargs": []}, "kwargs"),
        ],
    )
    def test_a_bad_edit_is_a_400_naming_the_field_and_changes_nothing(
        self, operator, world, runner, body, field
    ):
        before = runner.storage.get_recurring(world.recurring_id)

        response = post(operator, f"/recurring/{world.recurring_id}/edit", body)

        assert response.status_code == 400
        assert response["Content-Type"] == "application/problem+json"
        assert field in response.json()["errors"]
        assert runner.storage.get_recurring(world.recurring_id) == before

    @pytest.mark.parametrize("body", ["{oops", "[]", "{}", '{"queue": "other"}'])
    def test_a_body_that_is_not_an_edit_is_a_400(self, operator, world, body):
        response = operator.post(
            f"/admin/millrace/api/v1/recurring/{world.recurring_id}/edit",
            body,
            content_type="application/json",
        )
        assert response.status_code == 400

    def test_an_edit_of_an_unknown_definition_is_a_404(self, operator, world):
        assert post(operator, "/recurring/nope/edit", {"cron": "* * * * *"}).status_code == 404

    def test_a_viewer_gets_the_same_404_as_an_unknown_url(self, viewer, world):
        assert post(viewer, f"/recurring/{world.recurring_id}/disable").status_code == 404
        assert post(viewer, f"/recurring/{world.recurring_id}/edit", {"cron": "x"}).status_code == (
            404
        )


def test_other_actions_leave_their_audit_lines_too(operator, world, caplog):
    caplog.set_level(logging.INFO, logger=AUDIT)

    operator.post(reverse("millrace_dashboard:queue-action", args=["emails", "pause"]))
    operator.post(reverse("millrace_dashboard:recurring-bulk"), {"ids": [world.recurring_id]})
    post(operator, f"/jobs/{world.enqueued}/cancel")
    post(operator, "/signals/paid/nobody", {"amount": 1})

    lines = [record.getMessage() for record in caplog.records if record.name == AUDIT]
    assert [line.split(":")[0] for line in lines] == [
        "operator pause emails",
        "operator bulk trigger nightly-cleanup",
        f"operator cancel {world.enqueued}",
        "operator signal paid/nobody",
    ]
    assert lines[-1].startswith("operator signal paid/nobody: 404 No workflow instance")


def test_enabling_a_definition_whose_stored_cron_no_longer_parses_is_a_409(operator, world, runner):
    stored = runner.storage.get_recurring(world.recurring_id)
    runner.storage.upsert_recurring(replace(stored, id="legacy", cron="0 3 * * * *"))
    assert runner.storage.disable_recurring("legacy")

    response = post(operator, "/recurring/legacy/enable")

    assert response.status_code == 409
    assert "edit its cron first" in response.json()["detail"]
    assert runner.storage.get_recurring("legacy").enabled is False
