"""Expiry and the recurring overlap policy as operators see them: pages and the API."""

from __future__ import annotations

from datetime import timedelta

from django.test import Client
from django.urls import reverse

from millrace_django.contract import JobState, expired_reason
from millrace_django.testing import JobRunner
from tests.dashboard.sample import build_report, send_welcome, sync_partner

API = "/admin/millrace/api/v1"


def job_page(client: Client, job_id: object) -> str:
    response = client.get(reverse("millrace_dashboard:job", args=[job_id]))
    assert response.status_code == 200
    return response.content.decode()


def recurring_rows(client: Client) -> dict[str, str]:
    """The recurring page's rows by definition id, as HTML."""
    page = client.get(reverse("millrace_dashboard:recurring")).content.decode()
    rows = page.split('<tr data-recurring="')[1:]
    return {row.split('"', 1)[0]: row.split("</tr>", 1)[0] for row in rows}


def test_an_expired_job_shows_its_deadline_and_reason_on_its_page_and_in_the_api(
    operator: Client, runner: JobRunner
) -> None:
    job_id = runner.client.enqueue(send_welcome, 5, expires=timedelta(minutes=1))
    deadline = runner.clock.now() + timedelta(minutes=1)
    runner.advance(timedelta(minutes=1))  # the scheduler's pass ends it
    runner.assert_state(job_id, JobState.CANCELLED)

    page = job_page(operator, job_id)
    detail = operator.get(f"{API}/jobs/{job_id}").json()

    assert 'id="mr-expired"' in page and 'id="mr-deadline"' in page
    assert "<h2>Reason</h2>" in page and "not started by its deadline" in page
    assert detail["state"] == "cancelled"
    assert detail["lastError"] == expired_reason(deadline)
    assert detail["expiresAt"] == deadline.isoformat()


def test_a_job_cancelled_before_its_deadline_is_not_shown_as_expired(
    operator: Client, runner: JobRunner
) -> None:
    job_id = runner.client.enqueue(send_welcome, 6, expires=timedelta(hours=1))
    assert runner.client.cancel(job_id)

    page = job_page(operator, job_id)

    assert 'id="mr-deadline"' in page
    assert 'id="mr-expired"' not in page and "<h2>Reason</h2>" not in page


def test_the_recurring_page_and_api_show_the_overlap_policy_the_last_skip_and_a_held_fire(
    operator: Client, runner: JobRunner
) -> None:
    client = runner.client
    client.upsert_recurring("sync", sync_partner, cron="*/5 * * * *", args=["a"], overlap="skip")
    client.upsert_recurring(
        "export", build_report, cron="*/5 * * * *", args=["2026-12"], overlap="queue"
    )
    client.upsert_recurring("plain", sync_partner, cron="*/5 * * * *", args=["b"])
    runner.advance(timedelta(minutes=5))  # each fires once; nothing runs the jobs
    runner.advance(timedelta(minutes=5))  # the next occurrences: skipped, held, fired

    rows = recurring_rows(operator)
    items = {item["id"]: item for item in operator.get(f"{API}/recurring").json()["items"]}

    assert "skip" in rows["sync"] and "last skipped" in rows["sync"]
    assert "held" in rows["export"] and "last skipped" not in rows["export"]
    assert "allow" in rows["plain"] and "held" not in rows["plain"]
    assert [items[i]["overlap"] for i in ("sync", "export", "plain")] == ["skip", "queue", "allow"]
    assert items["sync"]["lastSkipTime"] is not None
    assert items["export"]["lastSkipTime"] is None
