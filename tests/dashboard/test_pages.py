"""Every page shows the read model: overview, lists, details, recurring, workflows."""

from __future__ import annotations

import re

from django.test import Client
from django.urls import reverse

from tests.dashboard.sample import WORKER, World


def html(client: Client, name: str, *args: object, query: str = "") -> str:
    response = client.get(reverse(f"millrace_dashboard:{name}", args=args) + query)
    assert response.status_code == 200, response.content[:500]
    return response.content.decode()


def card(page: str, state: str) -> int:
    match = re.search(rf'data-state="{state}"><a [^>]*><span class="mr-n">(\d+)</span>', page, re.S)
    assert match, state
    return int(match.group(1))


class TestOverview:
    def test_counts_every_job_state_including_zeros(self, operator: Client, world: World):
        page = html(operator, "overview")
        assert {s: card(page, s) for s in ("succeeded", "dead", "failed", "processing")} == {
            "succeeded": 5,  # two sample jobs, the fired occurrence, two workflow steps
            "dead": 2,
            "failed": 1,
            "processing": 1,
        }
        assert card(page, "cancelled") == 0
        assert card(page, "awaiting") == 1

    def test_shows_queue_depths_recurring_instances_and_workers(self, operator, world):
        page = html(operator, "overview")
        queues = page[page.index('id="mr-queues"') : page.index('id="mr-recurring"')]
        assert re.search(r">emails</a>.*?<td>1</td>", queues, re.S)
        assert re.search(r">default</a>.*?<td>0</td>", queues, re.S)
        assert 'id="mr-instances"' in page and "suspended" in page
        assert "No worker is alive now." in page  # the registry's; none registered here
        assert "Not available yet" not in page
        throughput = page[page.index('id="mr-throughput"') :]
        assert '<svg class="mr-chart"' in throughput

    def test_state_counts_link_to_the_filtered_list(self, operator, world):
        page = html(operator, "overview")
        assert f'href="{reverse("millrace_dashboard:jobs")}?state=dead"' in page

    def test_filters_by_tenant(self, operator, world):
        page = html(operator, "overview", query="?tenant=acme")
        assert card(page, "enqueued") == 1
        assert card(page, "succeeded") == 0
        untenanted = html(operator, "overview", query="?untenanted=on")
        assert card(untenanted, "enqueued") == 1  # the other one belongs to acme


class TestJobs:
    def test_lists_jobs_newest_first_without_their_arguments(self, operator, world):
        page = html(operator, "jobs")
        rows = re.findall(r'<tr data-job="([^"]+)"', page)
        assert rows[0] == str(world.tenanted)
        assert str(world.dead) in rows
        assert "uploads/orders.xlsx" not in page
        assert "tests.dashboard.sample:import_orders" in page

    def test_a_dead_job_shows_its_arguments_traceback_and_attempts(self, operator, world):
        page = html(operator, "job", world.dead)
        assert "uploads/orders.xlsx" in page
        assert "Traceback (most recent call last)" in page
        assert "ValueError: uploads/orders.xlsx: line 3: not a CSV file" in page
        assert "Attempt 1 failed on millrace-test-runner" in page
        assert 'id="mr-requeue"' in page
        assert 'id="mr-cancel"' not in page and 'id="mr-run-now"' not in page

    def test_a_finished_job_shows_its_result_progress_and_logs(self, operator, world):
        page = html(operator, "job", world.report)
        assert "report 2026-10 ready" in page
        assert 'value="1.0"' in page and "100%" in page
        assert "read the orders of 2026-10" in page and "wrote 42 rows" in page
        assert "Finished: succeeded" in page

    def test_a_job_shows_the_checkpoint_it_saved(self, operator, world):
        page = html(operator, "job", world.report)
        checkpoint = page[page.index('id="mr-checkpoint"') :]
        assert "&quot;rows_written&quot;: 42" in checkpoint.split("</pre>")[0]
        assert "No checkpoint saved." in html(operator, "job", world.dead)

    def test_a_failed_job_offers_run_now_and_cancel(self, operator, world):
        page = html(operator, "job", world.failed)
        assert 'id="mr-run-now"' in page and 'id="mr-cancel"' in page
        assert "ConnectionError: the partner API timed out for acme-gmbh" in page

    def test_a_running_job_shows_its_worker(self, operator, world):
        page = html(operator, "job", world.processing)
        assert WORKER in page and "lease until" in page
        assert 'id="mr-cancel"' in page

    def test_a_continuation_links_its_parent(self, operator, world):
        page = html(operator, "job", world.awaiting)
        assert reverse("millrace_dashboard:job", args=[world.parent]) in page

    def test_a_workflow_step_links_its_instance(self, operator, world, runner):
        step = next(j for j in runner.jobs() if j.workflow_instance_id == world.waiting_instance)
        page = html(operator, "job", step.id)
        assert reverse("millrace_dashboard:instance", args=[world.waiting_instance]) in page
        assert step.activity_node_id in page

    def test_a_fired_job_names_its_recurring_definition(self, operator, world):
        assert "nightly-cleanup" in html(operator, "job", world.fired)

    def test_an_unknown_job_is_404(self, operator, world, runner):
        from uuid import uuid4

        assert operator.get(reverse("millrace_dashboard:job", args=[uuid4()])).status_code == 404
        assert operator.get("/admin/millrace/jobs/not-a-uuid/").status_code == 404


class TestRecurring:
    def test_shows_the_schedule_in_its_time_zone_and_the_last_outcome(self, operator, world):
        page = html(operator, "recurring")
        assert "0 3 * * *" in page and "Europe/Paris" in page
        assert re.search(r"\d{4}-\d\d-\d\d 03:00 CE(S)?T", page)  # 3 a.m. in Paris
        assert reverse("millrace_dashboard:job", args=[world.fired]) in page
        assert "never" in page  # triggered, but never fired on schedule
        assert "Trigger now" in page


class TestWorkflows:
    def test_lists_instances(self, operator, world):
        page = html(operator, "instances")
        assert "dash-order" in page and "dash-payment" in page
        assert str(world.waiting_instance) in page

    def test_an_instance_shows_its_data_graph_and_live_position(self, operator, world):
        page = html(operator, "instance", world.waiting_instance)
        assert "order-1001" in page and "&quot;reserved&quot;: true" in page
        assert '<svg class="mr-graph"' in page
        assert re.search(r'class="mr-node mr-node-done" data-node="a1"', page)
        assert re.search(r'class="mr-node mr-node-waiting" data-node="sig1"', page)
        assert re.search(r'class="mr-node mr-node-idle" data-node="a2"', page)
        signals = reverse("millrace_dashboard:signals")
        assert f"{signals}?name=approved&amp;correlation_id=order-1001" in page
        assert 'id="mr-cancel-instance"' in page and 'id="mr-retry"' not in page

    def test_a_suspended_instance_shows_its_failure_and_recovery(self, operator, world):
        page = html(operator, "instance", world.suspended_instance)
        assert "card declined: insufficient funds" in page
        assert 'id="mr-retry"' in page and 'id="mr-skip"' in page and 'id="mr-abandon"' in page
        assert re.search(r'class="mr-node mr-node-failed" data-node="a1"', page)

    def test_an_unknown_instance_is_404(self, operator, world):
        from uuid import uuid4

        path = reverse("millrace_dashboard:instance", args=[uuid4()])
        assert operator.get(path).status_code == 404


def test_queues_and_workers_page(operator: Client, world: World):
    page = html(operator, "queues")
    assert "reports" in page
    assert "not available yet" not in page.lower()
    assert 'class="button mr-danger mr-pause"' in page
    assert 'id="mr-registry"' in page or "No worker has registered yet." in page


def test_pausing_a_queue_from_the_queues_page(operator: Client, world: World):
    path = reverse("millrace_dashboard:queue-action", args=["emails", "pause"])
    assert operator.get(path).status_code in (404, 405)  # POST only
    response = operator.post(path, follow=True)
    assert response.status_code == 200
    page = response.content.decode()
    assert "Queue &#x27;emails&#x27; paused" in page or "Queue 'emails' paused" in page
    assert 'class="button mr-resume"' in page
    response = operator.post(
        reverse("millrace_dashboard:queue-action", args=["emails", "resume"]), follow=True
    )
    assert 'class="button mr-resume"' not in response.content.decode()


def test_the_registry_shows_live_and_gone_workers(operator: Client, world: World):
    from datetime import timedelta

    from millrace_django import assembly
    from millrace_django.runtime.worker_registry import WorkerRegistration

    storage, clock = assembly.storage(), assembly.clock()
    WorkerRegistration(
        storage, clock, worker_id="old-worker", queues=["emails"], concurrency=2
    ).beat(0)
    storage.record_worker_heartbeat(
        WorkerRegistration(
            storage, clock, worker_id="live-worker", queues=["default"], concurrency=4
        ).heartbeat(3)
    )
    old = next(w for w in storage.list_workers() if w.worker_id == "old-worker")
    from dataclasses import replace

    storage.record_worker_heartbeat(replace(old, seen_at=old.seen_at - timedelta(hours=1)))
    page = html(operator, "queues")
    registry = page[page.index('id="mr-registry"') :]
    assert re.search(r'mr-worker-gone"><td class="mr-mono">old-worker', registry)
    assert re.search(r'mr-worker-alive"><td class="mr-mono">live-worker', registry)
    assert "3 / 4" in registry


def test_the_jobs_list_searches_targets(operator: Client, world: World):
    page = html(operator, "jobs", query="?target=NO-SUCH-TARGET")
    assert "Search on the target is not available yet" not in page
    assert 'name="target"' in page


def test_signals_form_is_prefilled_from_the_query(operator: Client, world: World):
    page = html(operator, "signals", query="?name=approved&correlation_id=order-1001")
    assert 'value="approved"' in page and 'value="order-1001"' in page
