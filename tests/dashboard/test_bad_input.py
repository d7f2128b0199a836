"""Hostile and unusual input at the dashboard's boundary: a 4xx that says why, never a
500, and nothing under the mount that tells a refused visitor the dashboard is there.
(NUL characters, which PostgreSQL refuses, are tried there: test_bad_input_postgres.py.)"""

from __future__ import annotations

import json

import pytest
from django.test import Client
from django.urls import reverse

from millrace_django.contract import InstanceState
from millrace_django.dashboard.wire import MAX_JSON_DEPTH
from tests.dashboard.sample import World

BASE = "/admin/millrace/"
API = f"{BASE}api/v1"


def nested(depth: int) -> str:
    return "[" * depth + "]" * depth


class TestDeepJson:
    @pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 100_000])
    def test_a_signal_body_nested_too_deep_is_a_400_problem(
        self, operator: Client, world: World, runner, depth: int
    ):
        path = f"{API}/signals/approved/{world.order_id}"
        response = operator.post(path, nested(depth), content_type="application/json")
        assert response.status_code == 400
        assert response["Content-Type"] == "application/problem+json"
        assert response.json()["detail"] == (
            f"The JSON nests deeper than {MAX_JSON_DEPTH} levels, the most accepted."
        )
        runner.assert_instance(world.waiting_instance, InstanceState.SUSPENDED)

    def test_a_body_at_the_depth_limit_is_read(self, operator: Client, world: World, runner):
        path = f"{API}/signals/approved/{world.order_id}"
        response = operator.post(path, nested(MAX_JSON_DEPTH), content_type="application/json")
        assert response.status_code == 200

    def test_a_bulk_body_nested_too_deep_is_a_400_problem(self, operator: Client, world: World):
        body = json.dumps({"ids": json.loads(nested(MAX_JSON_DEPTH))})
        response = operator.post(f"{API}/jobs/bulk/cancel", body, content_type="application/json")
        assert response.status_code == 400
        assert "nests deeper" in response.json()["detail"]

    @pytest.mark.parametrize("depth", [MAX_JSON_DEPTH + 1, 100_000])
    def test_a_signal_form_payload_nested_too_deep_is_a_form_error(
        self, operator: Client, world: World, runner, depth: int
    ):
        response = operator.post(
            reverse("millrace_dashboard:signals"),
            {"name": "approved", "correlation_id": world.order_id, "payload": nested(depth)},
        )
        assert response.status_code == 400
        assert "nests deeper than 100 levels" in response.content.decode()
        runner.assert_instance(world.waiting_instance, InstanceState.SUSPENDED)


class TestQueueNamesWithSlashes:
    @pytest.fixture(autouse=True)
    def queues(self, settings) -> None:
        settings.MILLRACE = {
            **settings.MILLRACE,
            "QUEUES": ["default", "emails", "reports", "eu/emails"],
        }

    def paused(self, client: Client) -> set[str]:
        listed = client.get(f"{API}/queues").json()["queues"]
        return {queue["name"] for queue in listed if queue["paused"]}

    def test_the_queues_page_offers_to_pause_them(self, operator: Client, world: World):
        response = operator.get(reverse("millrace_dashboard:queues"))
        assert response.status_code == 200
        assert f'action="{BASE}queues/eu/emails/pause/"' in response.content.decode()

    def test_the_page_pauses_and_resumes_them(self, operator: Client, world: World):
        assert operator.post(f"{BASE}queues/eu/emails/pause/").status_code == 302
        assert self.paused(operator) == {"eu/emails"}
        assert operator.post(f"{BASE}queues/eu/emails/resume/").status_code == 302
        assert self.paused(operator) == set()

    def test_the_api_pauses_them_sent_plain_or_encoded(self, operator: Client, world: World):
        assert operator.post(f"{API}/queues/eu/emails/pause").status_code == 200
        assert self.paused(operator) == {"eu/emails"}
        assert operator.post(f"{API}/queues/eu%2Femails/resume").status_code == 200
        assert self.paused(operator) == set()

    def test_dot_segments_in_a_name_stay_in_the_name(self, operator: Client, settings):
        settings.MILLRACE = {**settings.MILLRACE, "QUEUES": ["default", "../jobs"]}
        url = reverse("millrace_dashboard:queue-action", args=["../jobs", "pause"])
        assert operator.post(url).status_code == 302
        assert self.paused(operator) == {"../jobs"}


class TestTheMountIsNotDisclosed:
    UNDER_THE_MOUNT = [
        "",
        "nope/",
        "nope",
        "jobs",
        "queues",
        "api/v1/nope",
        "api/v1/jobs/",
        "static/x.css",
    ]

    @pytest.mark.parametrize("path", UNDER_THE_MOUNT)
    def test_a_refused_visitor_gets_the_same_404_everywhere_under_it(
        self, client: Client, staff_without_permissions: Client, path: str
    ):
        reference = client.get(BASE)
        for visitor in (client, staff_without_permissions):
            for method in (visitor.get, visitor.post):
                response = method(BASE + path)
                assert response.status_code == 404, (method, path)
                assert response["Content-Type"] == reference["Content-Type"]
                assert response.content == reference.content

    def test_an_operator_gets_the_slash_appended_and_404_elsewhere(self, operator: Client):
        response = operator.get(f"{BASE}jobs?state=dead")
        assert (response.status_code, response["Location"]) == (301, f"{BASE}jobs/?state=dead")
        assert operator.get(f"{BASE}nope").status_code == 404
        assert operator.get(f"{BASE}nope/").status_code == 404
        assert operator.get(f"{API}/jobs/").status_code == 404
