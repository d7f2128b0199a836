"""What the pages say about jobs, workers and workflows, read as an operator reads it:
counts that mean what they say, events in the order they happened, ids that tell rows
apart, workflow jobs by their workflow and step."""

from __future__ import annotations

import re
from datetime import timedelta
from uuid import UUID

from django.test import Client
from django.urls import reverse

from millrace_django import Retry, assembly
from millrace_django.contract import ClaimRequest, JobRecord, JobState, JobTransition
from millrace_django.engine.workflow import Saga, Step, Workflow
from millrace_django.runtime.worker_registry import WorkerRegistration
from millrace_django.testing import JobRunner
from tests.dashboard.sample import charge_card, nightly_cleanup, reserve_stock, send_welcome


def release_stock(ctx: object) -> None:
    """Nothing to undo in the sample: the compensation only has to run."""


SAGA_FLOW = Workflow(
    "dash-saga",
    steps=[Saga([Step(reserve_stock, compensate=release_stock), Step(charge_card)])],
    retry=Retry.none(),
)


def html(client: Client, name: str, *args: object, query: str = "") -> str:
    response = client.get(reverse(f"millrace_dashboard:{name}", args=args) + query)
    assert response.status_code == 200, response.content[:500]
    return response.content.decode()


def section(page: str, element_id: str) -> str:
    """The page from the element with ``element_id`` on."""
    return page[page.index(f'id="{element_id}"') :]


def row_of(page: str, job_id: UUID) -> str:
    """The jobs list's row of ``job_id``."""
    match = re.search(rf'<tr data-job="{job_id}">(.*?)</tr>', page, re.S)
    assert match, f"no row for {job_id}"
    return match.group(1)


def last_error(page: str) -> str:
    """The job page's "Last error" section."""
    return page.split("<h2>Last error</h2>")[1].split('<div class="mr-section">')[0]


def claim(runner: JobRunner, worker: str = "w1") -> JobRecord:
    """Claim, as ``worker``, the one job enqueued on queue ``default`` (the sample world
    leaves none there)."""
    request = ClaimRequest(
        worker_id=worker, queues=frozenset({"default"}), max_count=1, lease=timedelta(hours=1)
    )
    [job] = runner.storage.claim(request)
    return job


def ended(job: JobRecord, target: JobState, **fields: object) -> JobTransition:
    """The worker's transition of the claimed ``job`` to ``target``."""
    assert job.worker_id is not None
    values: dict[str, object] = {"failures": job.failures, **fields}
    return JobTransition(
        job_id=job.id,
        expected_worker_id=job.worker_id,
        expected_attempt=job.attempt,
        target=target,
        **values,  # type: ignore[arg-type]
    )


class TestInterruptions:
    def test_a_job_that_succeeded_first_time_was_never_interrupted(self, operator, world):
        job = operator.get(f"/admin/millrace/api/v1/jobs/{world.succeeded}").json()
        assert (job["attempt"], job["failures"], job["interruptions"]) == (1, 0, 0)
        row = row_of(html(operator, "jobs"), world.succeeded)
        assert re.search(r'data-interrupted="0">1</td>', row)

    def test_a_released_attempt_counts_as_one_interruption_once_it_ran_again(
        self, operator, world, runner
    ):
        job_id = runner.client.enqueue(nightly_cleanup)
        assert runner.storage.apply(ended(claim(runner, "w1"), JobState.ENQUEUED))
        second = claim(runner, "w2")
        assert runner.storage.apply(
            ended(second, JobState.SUCCEEDED, finished_at=runner.clock.now())
        )
        job = operator.get(f"/admin/millrace/api/v1/jobs/{job_id}").json()
        assert (job["attempt"], job["failures"], job["interruptions"]) == (2, 0, 1)
        row = row_of(html(operator, "jobs"), job_id)
        assert re.search(
            r'data-interrupted="1">2 <span class="mr-muted">\(1 interrupted\)</span></td>', row
        )
        attempts = section(html(operator, "job", job_id), "mr-attempts").split("</dd>")[0]
        assert attempts.endswith(">2 started, 0 failed, 1 interrupted")


class TestTimeline:
    def test_the_end_of_a_job_follows_its_last_attempt_whatever_the_clocks_say(
        self, operator, world, runner
    ):
        job_id = runner.client.enqueue(nightly_cleanup)
        job = claim(runner)
        dead = ended(
            job, JobState.DEAD, failures=1, finished_at=runner.clock.now(), error="gave up"
        )
        runner.advance(timedelta(milliseconds=20))  # the storage records the attempt later
        assert runner.storage.apply(dead)
        timeline = section(html(operator, "job", job_id), "mr-timeline")
        labels = re.findall(r"<strong>(.*?)</strong>", timeline)
        assert labels[:3] == ["Created", "Attempt 1 failed on w1", "Finished: dead"]

    def test_a_retry_that_is_due_comes_after_the_attempt_that_failed(self, operator, world):
        timeline = section(html(operator, "job", world.failed), "mr-timeline")
        labels = re.findall(r"<strong>(.*?)</strong>", timeline)
        assert labels[:3] == ["Created", "Attempt 1 failed on millrace-test-runner", "Retry due"]


class TestActiveWorkers:
    def test_the_overview_counts_every_registered_worker_alive(self, operator, world):
        storage, clock = assembly.storage(), assembly.clock()  # the dashboard's own
        for n in range(8):
            registration = WorkerRegistration(
                storage, clock, worker_id=f"pod-{n}", queues=["emails"], concurrency=8
            )
            storage.record_worker_heartbeat(registration.heartbeat(5))
        workers = section(html(operator, "overview"), "mr-workers")
        workers = workers[: workers.index('id="mr-throughput"')]
        assert all(f">pod-{n}<" in workers for n in range(8))
        census = re.sub(r"<[^>]+>", "", section(workers, "mr-census").split("</p>")[0])
        assert "8 alive, 40 jobs in flight of 64 slots" in census


class TestErrors:
    def test_a_traceback_shows_its_exception_line_first(self, operator, world):
        error = last_error(html(operator, "job", world.dead))
        exception = "ValueError: uploads/orders.xlsx: line 3: not a CSV file"
        assert error.index(f'class="mr-exception">{exception}</p>') < error.index("Traceback")

    def test_a_one_line_error_shows_once(self, operator, world, runner):
        job_id = runner.client.enqueue(nightly_cleanup)
        job = claim(runner)
        final = ended(
            job, JobState.DEAD, failures=1, finished_at=runner.clock.now(), error="gave up"
        )
        assert runner.storage.apply(final)
        error = last_error(html(operator, "job", job_id))
        assert error.count("gave up") == 1 and "<pre" not in error


class TestIds:
    def test_ids_created_together_are_told_apart_in_the_list(self, operator, world, runner):
        made = [runner.client.enqueue(send_welcome, n) for n in range(3)]
        page = html(operator, "jobs")
        shown = {
            job_id: re.search(r'title="([^"]+)">…([0-9a-f]+)</a>', row_of(page, job_id))
            for job_id in made
        }
        assert all(match is not None for match in shown.values())
        texts = {job_id: (m.group(1), m.group(2)) for job_id, m in shown.items() if m}
        assert {full for full, _ in texts.values()} == {str(job_id) for job_id in made}
        assert len({part for _, part in texts.values()}) == 3
        assert all(str(job_id).endswith(part) for job_id, (_, part) in texts.items())


class TestWorkflowJobs:
    def test_a_workflow_job_is_listed_by_its_workflow_instance_and_step(
        self, operator, world, runner
    ):
        step = next(
            job
            for job in runner.jobs()
            if job.workflow_instance_id == world.waiting_instance and job.activity_node_id == "a1"
        )
        row = row_of(html(operator, "jobs"), step.id)
        assert "<strong>dash-order</strong>" in row
        assert reverse("millrace_dashboard:instance", args=[world.waiting_instance]) in row
        assert f"…{str(world.waiting_instance)[-12:]}</a>" in row
        assert 'step <span class="mr-mono">a1</span>' in row
        assert ">millrace_django.engine.workflow.jobs:run_node<" not in row

    def test_the_list_shows_when_a_job_runs_and_when_it_finished(self, operator, world, runner):
        page = html(operator, "jobs")
        due = runner.get(world.scheduled).due_at
        finished = runner.get(world.succeeded).finished_at
        assert due is not None and finished is not None
        scheduled = row_of(page, world.scheduled)
        assert f'class="mr-nowrap mr-runs-at"><span title="{due.isoformat()}">' in scheduled
        succeeded = row_of(page, world.succeeded)
        assert f'class="mr-nowrap mr-finished"><span title="{finished.isoformat()}">' in succeeded

    def test_a_job_page_lists_its_continuations(self, operator, world):
        related = section(html(operator, "job", world.parent), "mr-related")
        continuations = section(related, "mr-continuations")
        assert f'data-job="{world.awaiting}"' in continuations
        assert reverse("millrace_dashboard:job", args=[world.awaiting]) in continuations
        assert "Not available yet" not in related
        job = operator.get(f"/admin/millrace/api/v1/jobs/{world.parent}").json()
        assert [child["id"] for child in job["continuations"]] == [str(world.awaiting)]


class TestInstances:
    def test_a_compensated_instance_marks_its_failed_step_and_shows_the_exception(
        self, operator, world, runner
    ):
        instance_id = runner.workflows.start(SAGA_FLOW, {"order_id": "order-1003"})
        runner.run_until_idle(throw_on_failure=False)
        page = html(operator, "instance", instance_id)
        assert re.search(r'class="mr-node mr-node-failed" data-node="a2"', page)
        assert re.search(r'class="mr-node mr-node-done" data-node="a1"', page)
        exception = section(page, "mr-instance-error")
        assert re.search(
            r'class="mr-exception">RuntimeError: card declined: insufficient funds<', exception
        )


class TestThroughput:
    def test_the_chart_has_a_legend(self, operator, world):
        throughput = section(html(operator, "overview"), "mr-throughput")
        legend = section(throughput, "mr-throughput-legend")
        assert "succeeded" in legend and "dead" in legend

    def test_a_tenant_filter_says_the_chart_counts_every_tenant(self, operator, world):
        scope = section(html(operator, "overview", query="?tenant=acme"), "mr-throughput-scope")
        assert "the tenant filter does not apply to this chart" in scope.split("</p>")[0]


class TestAdmin:
    def test_the_admin_index_names_the_recurring_jobs(self, operator, world):
        index = operator.get("/admin/").content.decode()
        assert ">Recurring jobs</a>" in index
        assert "Recurrings" not in index
