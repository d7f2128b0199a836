"""A job's hard timeout and retry filters as operators see them: its page and the API."""

from __future__ import annotations

from datetime import timedelta

from django.test import Client
from django.urls import reverse

from millrace_django import Retry
from millrace_django.testing import JobRunner
from tests.dashboard.sample import send_welcome

API = "/admin/millrace/api/v1"


def test_the_job_page_and_api_show_the_hard_timeout_and_the_retry_filters(
    operator: Client, runner: JobRunner
) -> None:
    configured = send_welcome.using(
        hard_timeout=90,
        retry=Retry.fixed(timedelta(seconds=5), 3),
        retry_on=ConnectionError,
        give_up_on=(ConnectionRefusedError, KeyError),
    )
    job_id = runner.client.enqueue(configured, 7)

    page = operator.get(reverse("millrace_dashboard:job", args=[job_id]))
    detail = operator.get(f"{API}/jobs/{job_id}").json()

    assert page.status_code == 200
    html = page.content.decode()
    assert "<dt>Hard timeout</dt>" in html and "0:01:30" in html
    assert '<dt>Retried on</dt><dd class="mr-mono">builtins.ConnectionError</dd>' in html
    assert "builtins.ConnectionRefusedError, builtins.KeyError" in html
    assert detail["hardTimeout"] == 90
    assert detail["retry"]["retryOn"] == ["builtins.ConnectionError"]
    assert detail["retry"]["giveUpOn"] == ["builtins.ConnectionRefusedError", "builtins.KeyError"]


def test_a_job_without_them_shows_none(operator: Client, runner: JobRunner) -> None:
    job_id = runner.client.enqueue(send_welcome, 8)
    html = operator.get(reverse("millrace_dashboard:job", args=[job_id])).content.decode()
    detail = operator.get(f"{API}/jobs/{job_id}").json()
    assert "Hard timeout" not in html and "Retried on" not in html and "Final on" not in html
    assert detail["hardTimeout"] is None
    assert (detail["retry"]["retryOn"], detail["retry"]["giveUpOn"]) == ([], [])
