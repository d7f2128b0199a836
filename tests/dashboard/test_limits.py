"""Flow-control limits as operators see them: the queues page and the queues API list
each limited queue and function with its limit, its running and its waiting jobs."""

from __future__ import annotations

from datetime import timedelta

from django.test import Client
from django.urls import reverse

from millrace_django.contract import ClaimRequest
from millrace_django.testing import JobRunner
from tests.dashboard.sample import send_welcome

API = "/admin/millrace/api/v1"
WELCOME = "tests.dashboard.sample:send_welcome"


def start_limited_jobs(runner: JobRunner) -> None:
    """Three welcome mails under a limit of one at once and 10 starts a minute: one
    claimed (running), two held back (waiting)."""
    limited = send_welcome.using(concurrency=1, rate="10/m")
    for user in range(3):
        runner.client.enqueue(limited, user)
    request = ClaimRequest(
        worker_id="w1", queues=frozenset({"emails"}), max_count=5, lease=timedelta(minutes=5)
    )
    assert len(runner.storage.claim(request)) == 1


def test_the_queues_api_serves_each_limit_with_its_running_and_waiting_jobs(
    operator: Client, runner: JobRunner
) -> None:
    start_limited_jobs(runner)

    limits = operator.get(f"{API}/queues").json()["limits"]

    assert limits == [
        {
            "scope": f"job:{WELCOME}",
            "kind": "job",
            "name": WELCOME,
            "concurrency": 1,
            "rate": "10/m",
            "running": 1,
            "waiting": 2,
            "keys": 0,
        }
    ]


def test_the_queues_page_shows_each_limit_and_links_to_its_waiting_jobs(
    operator: Client, runner: JobRunner
) -> None:
    assert "No active job carries a limit" in queues_page(operator)
    start_limited_jobs(runner)

    page = queues_page(operator)
    row = page.split('id="mr-limit-jobtestsdashboardsamplesend_welcome"')[1].split("</tr>")[0]
    cells = [cell.split("</td>")[0].strip() for cell in row.split("<td>")[2:]]

    assert cells == ["1", "10/m", "1", "2"]
    assert f"?target={WELCOME.replace(':', '%3A')}&amp;state=enqueued" in row


def queues_page(client: Client) -> str:
    response = client.get(reverse("millrace_dashboard:queues"))
    assert response.status_code == 200
    return response.content.decode()
