"""Who gets in: the policy, then a permission; every denial is a plain 404."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from tests.dashboard.sample import World

RECURRING = "nightly-cleanup"


def pages(world: World) -> list[str]:
    return [
        reverse("millrace_dashboard:overview"),
        reverse("millrace_dashboard:jobs"),
        reverse("millrace_dashboard:job", args=[world.dead]),
        reverse("millrace_dashboard:recurring"),
        reverse("millrace_dashboard:instances"),
        reverse("millrace_dashboard:instance", args=[world.waiting_instance]),
        reverse("millrace_dashboard:signals"),
        reverse("millrace_dashboard:queues"),
        reverse("millrace_dashboard:api-info"),
        reverse("millrace_dashboard:api-statistics"),
        reverse("millrace_dashboard:api-jobs"),
        reverse("millrace_dashboard:api-job", args=[world.dead]),
        reverse("millrace_dashboard:api-recurring"),
        reverse("millrace_dashboard:api-instances"),
        reverse("millrace_dashboard:api-instance", args=[world.waiting_instance]),
        reverse("millrace_dashboard:api-openapi"),
    ]


def actions(world: World) -> list[str]:
    return [
        reverse("millrace_dashboard:job-action", args=[world.enqueued, "cancel"]),
        reverse("millrace_dashboard:jobs-bulk"),
        reverse("millrace_dashboard:recurring-trigger", args=[RECURRING]),
        reverse("millrace_dashboard:recurring-bulk"),
        reverse("millrace_dashboard:instance-action", args=[world.suspended_instance, "skip"]),
        reverse("millrace_dashboard:instances-bulk"),
        reverse("millrace_dashboard:signals"),
        reverse("millrace_dashboard:api-job-action", args=[world.enqueued, "cancel"]),
        reverse("millrace_dashboard:api-jobs-bulk", args=["cancel"]),
        reverse("millrace_dashboard:api-recurring-trigger", args=[RECURRING]),
        reverse(
            "millrace_dashboard:api-instance-recovery", args=[world.suspended_instance, "skip"]
        ),
        reverse("millrace_dashboard:api-instance-cancel", args=[world.waiting_instance]),
        reverse("millrace_dashboard:api-signal", args=["approved", world.order_id]),
    ]


def assert_not_found_like_an_unknown_url(response, client: Client) -> None:
    unknown = client.get("/admin/millrace/no-such-page/")
    assert response.status_code == 404
    assert response["Content-Type"] == unknown["Content-Type"]


def test_anonymous_requests_get_404_on_every_page_and_action(client: Client, world: World):
    for path in pages(world):
        assert_not_found_like_an_unknown_url(client.get(path), client)
    for path in actions(world):
        # No CSRF token either: the denial comes first, so it is a 404, not a 403.
        assert_not_found_like_an_unknown_url(client.post(path), client)


def test_staff_without_millrace_permissions_get_404(staff_without_permissions: Client, world):
    for path in pages(world) + actions(world):
        assert staff_without_permissions.get(path).status_code == 404


def test_a_viewer_sees_every_page_but_no_action(viewer: Client, world: World):
    for path in pages(world):
        if "signals" in path:
            continue  # sending signals is an action
        assert viewer.get(path).status_code == 200, path
    for path in actions(world):
        assert viewer.post(path).status_code == 404, path
    page = viewer.get(reverse("millrace_dashboard:job", args=[world.enqueued])).content.decode()
    assert 'id="mr-cancel"' not in page
    assert "Signals" not in viewer.get(reverse("millrace_dashboard:overview")).content.decode()


def test_the_policy_is_asked_even_for_superusers(operator: Client, world: World, settings):
    settings.MILLRACE_DASHBOARD = {"AUTHORIZE": lambda request: False}
    for path in pages(world):
        assert operator.get(path).status_code == 404


def test_a_dotted_path_policy_is_imported(operator: Client, settings):
    settings.MILLRACE_DASHBOARD = {"AUTHORIZE": "tests.dashboard.test_authorization.only_ops"}
    assert operator.get(reverse("millrace_dashboard:overview")).status_code == 404
    assert (
        operator.get(reverse("millrace_dashboard:overview"), headers={"X-Ops": "1"}).status_code
        == 200
    )


def only_ops(request) -> bool:
    return request.headers.get("X-Ops") == "1"


def test_without_a_policy_everything_is_denied_outside_debug(operator: Client, settings):
    settings.MILLRACE_DASHBOARD = None
    settings.DEBUG = False
    assert operator.get(reverse("millrace_dashboard:overview")).status_code == 404


def test_without_a_policy_debug_lets_active_staff_in(operator: Client, settings, db):
    settings.MILLRACE_DASHBOARD = None
    settings.DEBUG = True
    assert operator.get(reverse("millrace_dashboard:overview")).status_code == 200
    assert Client().get(reverse("millrace_dashboard:overview")).status_code == 404


def test_an_invalid_setting_closes_the_dashboard(operator: Client, settings):
    settings.MILLRACE_DASHBOARD = {"AUTHORIZE": "no.such.module.policy"}
    assert operator.get(reverse("millrace_dashboard:overview")).status_code == 404


def test_an_authorized_post_without_a_csrf_token_is_refused(csrf_operator: Client, world: World):
    path = reverse("millrace_dashboard:job-action", args=[world.enqueued, "cancel"])
    assert csrf_operator.post(path).status_code == 403
    api = reverse("millrace_dashboard:api-job-action", args=[world.enqueued, "cancel"])
    refused = csrf_operator.post(api)
    assert refused.status_code == 403
    assert refused.json()["title"] == "CSRF check failed"


@pytest.mark.parametrize("method", ["get", "put", "delete"])
def test_actions_take_post_only(operator: Client, world: World, method: str):
    path = reverse("millrace_dashboard:job-action", args=[world.enqueued, "cancel"])
    assert getattr(operator, method)(path).status_code == 405


class TestAdminIntegration:
    def test_the_admin_index_shows_a_millrace_section_leading_to_the_dashboard(
        self, operator: Client, world: World
    ):
        index = operator.get("/admin/").content.decode()
        assert "Millrace" in index
        jobs = operator.get("/admin/millrace_django/job/")
        assert jobs.status_code == 302
        assert jobs["Location"] == reverse("millrace_dashboard:jobs")
        assert operator.get("/admin/millrace_django/recurring/")["Location"] == reverse(
            "millrace_dashboard:recurring"
        )
        assert operator.get("/admin/millrace_django/workflowinstance/")["Location"] == reverse(
            "millrace_dashboard:instances"
        )

    def test_the_section_page_links_the_overview(self, operator: Client):
        page = operator.get("/admin/millrace_django/").content.decode()
        assert f'href="{reverse("millrace_dashboard:overview")}"' in page

    def test_a_job_in_the_admin_opens_its_dashboard_page(self, operator: Client, world: World):
        from millrace_django.models import Job

        seq = Job.objects.get(uuid=world.dead).seq
        response = operator.get(f"/admin/millrace_django/job/{seq}/change/")
        assert response["Location"] == reverse("millrace_dashboard:job", args=[world.dead])

    def test_the_section_is_hidden_from_those_the_policy_refuses(
        self, staff_without_permissions: Client, operator: Client, settings
    ):
        assert "Millrace" not in staff_without_permissions.get("/admin/").content.decode()
        settings.MILLRACE_DASHBOARD = {"AUTHORIZE": lambda request: False}
        assert "millrace_django/job/" not in operator.get("/admin/").content.decode()

    def test_pages_use_the_admin_frame(self, operator: Client, world: World):
        page = operator.get(reverse("millrace_dashboard:overview")).content.decode()
        assert 'id="header"' in page and "Django administration" in page
        assert 'class="breadcrumbs"' in page and 'class="mr-tabs"' in page
