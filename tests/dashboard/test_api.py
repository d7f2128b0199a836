"""The JSON API: the same read model and actions, camelCase, problems for errors."""

from __future__ import annotations

import json
import re
from uuid import uuid4

import pytest
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, reverse

from millrace_django.contract import InstanceState, JobState
from millrace_django.dashboard.openapi import schema
from tests.dashboard.sample import World

API = "/admin/millrace/api/v1"


def get(client: Client, path: str, **query: object):
    return client.get(API + path, query)


def post(client: Client, path: str, body: object = None):
    data = json.dumps(body) if body is not None else ""
    return client.post(API + path, data, content_type="application/json")


def test_info_names_the_version_and_provider(operator: Client, world: World):
    assert get(operator, "/info").json() == {
        "apiVersion": "v1",
        "storageProvider": "millrace_django.storage.orm.provider.DjangoStorage",
    }


def test_statistics_report_every_state(operator: Client, world: World):
    stats = get(operator, "/statistics").json()
    assert set(stats["jobsByState"]) == {s.value for s in JobState}
    assert stats["jobsByState"]["cancelled"] == 0
    assert set(stats["instancesByState"]) == {s.value for s in InstanceState}
    assert stats["enqueuedByQueue"] == {"emails": 1, "reports": 1}
    assert stats["recurringDefinitions"] == 1
    assert get(operator, "/statistics", tenant="acme").json()["jobsByState"]["enqueued"] == 1


def test_a_job_page_is_camel_case_without_arguments_or_totals(operator: Client, world: World):
    body = get(operator, "/jobs", limit=2).json()
    assert set(body) == {"items", "nextCursor"}
    first = body["items"][0]
    assert set(first) == {
        "id", "queue", "state", "target", "priority", "createdAt", "dueAt", "finishedAt",
        "attempt", "failures", "interruptions", "tenantId", "workerId",
        "workflowInstanceId", "workflowDefinitionId", "activityNodeId",
    }  # fmt: skip
    following = get(operator, "/jobs", limit=2, cursor=body["nextCursor"]).json()
    assert following["items"][0]["id"] not in {i["id"] for i in body["items"]}


def test_job_filters_use_the_api_names(operator: Client, world: World, runner):
    created = runner.get(world.enqueued).created_at.isoformat()
    items = get(
        operator, "/jobs", state=["enqueued", "scheduled"], queue="reports", createdAfter=created
    ).json()["items"]
    assert {i["id"] for i in items} == {str(world.enqueued), str(world.parent)}
    assert get(operator, "/jobs", untenanted="true", tenant="acme").json()["items"]


def test_a_jobs_traceback_starts_at_the_jobs_own_call(operator: Client, world: World):
    job = get(operator, f"/jobs/{world.dead}").json()
    for text in (job["lastError"], job["attempts"][0]["error"]):
        first_frame = text.splitlines()[1]
        assert first_frame.startswith('  File "') and first_frame.endswith(", in import_orders")
        assert "millrace_django" not in text
        assert text.endswith("\nValueError: uploads/orders.xlsx: line 3: not a CSV file\n")


def test_a_job_shows_everything_the_detail_page_does(operator: Client, world: World):
    job = get(operator, f"/jobs/{world.dead}").json()
    assert job["state"] == "dead"
    assert job["invocation"] == {
        "target": "tests.dashboard.sample:import_orders",
        "args": ["uploads/orders.xlsx"],
        "kwargs": {},
    }
    assert "ValueError" in job["lastError"]
    assert job["attempts"][0]["outcome"] == "failed"
    assert job["retry"]["kind"] == "none"
    report = get(operator, f"/jobs/{world.report}").json()
    assert report["result"] == "report 2026-10 ready"
    assert report["checkpoint"] == {"rows_written": 42}
    assert get(operator, f"/jobs/{world.dead}").json()["checkpoint"] is None
    assert [line["message"] for line in report["logs"]] == [
        "read the orders of 2026-10",
        "wrote 42 rows",
    ]


def test_an_unknown_job_is_a_problem_404(operator: Client, world: World):
    response = get(operator, f"/jobs/{uuid4()}")
    assert response.status_code == 404
    assert response["Content-Type"] == "application/problem+json"
    assert response.json()["status"] == 404


@pytest.mark.parametrize("path", ["/jobs", "/recurring", "/instances"])
def test_a_bad_cursor_is_a_400_problem(operator: Client, world: World, path: str):
    response = get(operator, path, cursor="!!not-a-cursor!!")
    assert response.status_code == 400
    assert response.json()["title"] == "Invalid paging cursor"


def test_bad_parameters_are_a_400_naming_them(operator: Client, world: World):
    response = get(operator, "/jobs", state="exploded", createdAfter="soon", limit="x")
    assert response.status_code == 400
    assert set(response.json()["errors"]) == {"state", "createdAfter", "limit"}
    instances = get(operator, "/instances", definitionId="dash-order", definitionVersion="v1")
    assert set(instances.json()["errors"]) == {"definitionVersion"}


def test_recurring_and_instances(operator: Client, world: World):
    [definition] = get(operator, "/recurring").json()["items"]
    assert definition["id"] == "nightly-cleanup"
    assert definition["timezone"] == "Europe/Paris"
    assert definition["lastOutcome"] == "succeeded"
    assert definition["lastJobId"] == str(world.fired)
    items = get(operator, "/instances", definitionId="dash-order").json()["items"]
    assert [i["id"] for i in items] == [str(world.waiting_instance)]
    detail = get(operator, f"/instances/{world.waiting_instance}").json()
    assert detail["data"] == {"order_id": "order-1001", "reserved": True}
    assert detail["position"]["waiting"] == ["sig1"]
    assert detail["graph"]["start"] == "a1"
    stuck = get(operator, f"/instances/{world.suspended_instance}").json()["stuck"]
    assert stuck[0]["error"].splitlines()[1].endswith(", in charge_card")  # the step's own
    assert stuck[0]["error"].endswith("card declined: insufficient funds\n")


class TestActions:
    def test_cancel(self, operator, world, runner):
        assert post(operator, f"/jobs/{world.enqueued}/cancel").status_code == 200
        runner.assert_state(world.enqueued, JobState.CANCELLED)
        terminal = post(operator, f"/jobs/{world.enqueued}/cancel")
        assert terminal.status_code == 404
        assert "already cancelled" in terminal.json()["detail"]
        assert post(operator, f"/jobs/{uuid4()}/cancel").status_code == 404

    def test_run_now_only_from_failed_or_scheduled(self, operator, world, runner):
        assert post(operator, f"/jobs/{world.succeeded}/run-now").status_code == 404
        assert post(operator, f"/jobs/{world.awaiting}/run-now").status_code == 404
        assert post(operator, f"/jobs/{world.failed}/run-now").status_code == 200
        assert post(operator, f"/jobs/{world.scheduled}/run-now").status_code == 200
        runner.assert_state(world.failed, JobState.ENQUEUED)
        runner.assert_state(world.scheduled, JobState.ENQUEUED)

    def test_requeue_mints_a_new_job_or_is_a_409(self, operator, world, runner):
        done = post(operator, f"/jobs/{world.dead}/requeue")
        assert done.status_code == 200
        new = runner.get(__import__("uuid").UUID(done.json()["id"]))
        assert new.requeued_from == world.dead
        assert post(operator, f"/jobs/{world.enqueued}/requeue").status_code == 409
        assert post(operator, f"/jobs/{uuid4()}/requeue").status_code == 404

    def test_an_unknown_action_is_404(self, operator, world):
        assert post(operator, f"/jobs/{world.dead}/explode").status_code == 404
        assert post(operator, "/queues/emails/explode").status_code == 404

    def test_delete_removes_a_finished_job_and_refuses_an_active_one(self, operator, world):
        assert post(operator, f"/jobs/{world.dead}/delete").status_code == 200
        assert operator.get(f"{API}/jobs/{world.dead}").status_code == 404
        refused = post(operator, f"/jobs/{world.enqueued}/delete")
        assert refused.status_code == 409
        assert "only finished jobs" in refused.json()["detail"]

    def test_pause_and_resume_a_queue(self, operator, world):
        assert post(operator, "/queues/emails/pause").status_code == 200
        listed = {q["name"]: q for q in operator.get(f"{API}/queues").json()["queues"]}
        assert listed["emails"]["paused"] is True
        assert listed["default"]["paused"] is False
        assert post(operator, "/queues/emails/resume").status_code == 200
        listed = {q["name"]: q for q in operator.get(f"{API}/queues").json()["queues"]}
        assert listed["emails"]["paused"] is False

    def test_the_queues_read_lists_registered_workers(self, operator, world):
        workers = operator.get(f"{API}/queues").json()["workers"]
        assert isinstance(workers, list)

    def test_bulk(self, operator, world, runner):
        response = post(
            operator, "/jobs/bulk/cancel", {"ids": [str(world.enqueued), str(world.dead)]}
        )
        assert response.status_code == 200
        body = response.json()
        assert body["done"] == [str(world.enqueued)]
        assert body["refused"][0]["id"] == str(world.dead)
        assert post(operator, "/jobs/bulk/cancel", {"ids": "all"}).status_code == 400
        assert post(operator, "/jobs/bulk/cancel", {"ids": []}).status_code == 400
        bad_json = operator.post(API + "/jobs/bulk/cancel", "{", content_type="application/json")
        assert bad_json.status_code == 400

    def test_trigger(self, operator, world, runner):
        assert post(operator, f"/recurring/{world.recurring_id}/trigger").status_code == 200
        assert post(operator, "/recurring/missing/trigger").status_code == 404

    def test_recovery_is_accepted_with_202(self, operator, world, runner):
        assert (
            post(operator, f"/instances/{world.suspended_instance}/recovery/SKIP").status_code
            == 202
        )
        runner.run_until_idle()
        runner.assert_instance(world.suspended_instance, InstanceState.COMPLETED)
        assert (
            post(operator, f"/instances/{world.suspended_instance}/recovery/skip").status_code
            == 404
        )
        assert (
            post(operator, f"/instances/{world.waiting_instance}/recovery/rewind").status_code
            == 400
        )
        assert (
            post(operator, f"/instances/{world.waiting_instance}/recovery/cancel").status_code
            == 400
        )
        bad_job = post(
            operator, f"/instances/{world.waiting_instance}/recovery/retry", {"jobId": "x"}
        )
        assert bad_job.status_code == 400

    def test_cancel_an_instance(self, operator, world, runner):
        assert post(operator, f"/instances/{world.waiting_instance}/cancel").status_code == 200
        assert post(operator, f"/instances/{world.waiting_instance}/cancel").status_code == 404

    def test_signals(self, operator, world, runner):
        assert (
            post(operator, f"/signals/approved/{world.order_id}", {"ok": True}).status_code == 200
        )
        runner.run_until_idle()
        runner.assert_instance(world.waiting_instance, InstanceState.COMPLETED)
        assert post(operator, f"/signals/approved/{world.order_id}").status_code == 404
        raw = operator.post(API + "/signals/approved/x", "{nope", content_type="application/json")
        assert raw.status_code == 400

    def test_actions_need_the_csrf_token_of_the_session(self, csrf_operator, world, runner):
        csrf_operator.get(API + "/info")
        page = csrf_operator.get(reverse("millrace_dashboard:jobs")).content.decode()
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
        path = f"{API}/jobs/{world.enqueued}/cancel"
        assert csrf_operator.post(path).status_code == 403
        assert csrf_operator.post(path, headers={"X-CSRFToken": token}).status_code == 200


def _api_routes() -> set[tuple[str, str]]:
    """``(method, OpenAPI path)`` of every API URL pattern."""
    found: set[tuple[str, str]] = set()
    resolver = get_resolver()
    names = {
        "api-info": "get", "api-statistics": "get", "api-jobs": "get", "api-job": "get",
        "api-recurring": "get", "api-instances": "get", "api-instance": "get",
        "api-openapi": "get", "api-job-action": "post", "api-jobs-bulk": "post",
        "api-recurring-trigger": "post", "api-recurring-edit": "post",
        "api-recurring-action": "post", "api-instance-recovery": "post",
        "api-instance-cancel": "post", "api-signal": "post", "api-queues": "get",
        "api-queue-action": "post", "api-catalog": "get", "api-catalog-function": "get",
    }  # fmt: skip

    def walk(patterns: list[URLPattern | URLResolver]) -> None:
        for pattern in patterns:
            if isinstance(pattern, URLResolver):
                walk(pattern.url_patterns)
            elif pattern.name and pattern.name.startswith("api-"):
                route = str(pattern.pattern).removeprefix("api/v1")
                route = re.sub(r"<(?:\w+:)?(\w+)>", lambda m: "{" + m.group(1) + "}", route)
                route = (
                    route.replace("{job_id}", "{id}")
                    .replace("{instance_id}", "{id}")
                    .replace("{recurring_id}", "{id}")
                    .replace("{correlation_id}", "{correlationId}")
                )
                found.add((names.pop(pattern.name), route))

    walk(resolver.url_patterns)
    assert not names, f"API routes missing from the URLconf: {names}"
    return found


def test_the_openapi_document_describes_exactly_the_api_routes(operator: Client, world):
    document = get(operator, "/openapi.json").json()
    assert document["openapi"] == "3.1.0"
    assert document["servers"] == [{"url": "http://testserver/admin/millrace/api/v1/"}]
    documented = {
        (method, path)
        for path, item in document["paths"].items()
        for method in item
        if method in ("get", "post")
    }
    assert documented == _api_routes()
    assert document == json.loads(json.dumps(schema("http://testserver/admin/millrace/api/v1/")))


def test_every_reference_in_the_openapi_document_resolves():
    document = schema()
    text = json.dumps(document)
    for name in set(re.findall(r'"#/components/schemas/(\w+)"', text)):
        assert name in document["components"]["schemas"], name


def test_a_job_detail_carries_exactly_the_fields_its_schema_lists(operator: Client, world):
    schemas = schema()["components"]["schemas"]
    _, details = schemas["JobDetails"]["allOf"]  # (the first is a reference to JobSummary)
    described = {*schemas["JobSummary"]["properties"], *details["properties"]}
    for job_id in (world.report, world.dead):
        assert set(get(operator, f"/jobs/{job_id}").json()) == set(described)
