"""Tags in the dashboard and the JSON API: shown on the job page, filtered by in the
jobs list and the API, and a malformed tag refused with a message."""

from __future__ import annotations

from django.test import Client
from django.urls import reverse

from millrace_django.testing import JobRunner
from tests.dashboard.sample import build_report, send_welcome

API = "/admin/millrace/api/v1"


def _seed(runner: JobRunner) -> tuple[str, str]:
    tagged = send_welcome.using(tags=["onboarding", "eu"]).enqueue(1)
    build_report.using(tags=["monthly"]).enqueue("2026-11")
    send_welcome.enqueue(2)
    return str(tagged), str(send_welcome.enqueue(3))


def test_the_api_lists_only_the_jobs_carrying_the_tag(viewer: Client, runner: JobRunner):
    tagged, _ = _seed(runner)

    response = viewer.get(f"{API}/jobs", {"tag": "onboarding"})

    assert response.status_code == 200
    assert [item["id"] for item in response.json()["items"]] == [tagged]


def test_the_api_job_details_carry_the_tags_sorted(viewer: Client, runner: JobRunner):
    tagged, plain = _seed(runner)

    assert viewer.get(f"{API}/jobs/{tagged}").json()["tags"] == ["eu", "onboarding"]
    assert viewer.get(f"{API}/jobs/{plain}").json()["tags"] == []


def test_the_jobs_page_filters_by_tag_and_the_job_page_links_its_tags(
    viewer: Client, runner: JobRunner
):
    tagged, plain = _seed(runner)

    listed = viewer.get(reverse("millrace_dashboard:jobs"), {"tag": "onboarding"})
    page = viewer.get(reverse("millrace_dashboard:job", args=[tagged])).content.decode()

    assert listed.status_code == 200
    assert tagged in listed.content.decode() and plain not in listed.content.decode()
    assert 'href="/admin/millrace/jobs/?tag=onboarding"' in page


def test_a_malformed_tag_filter_is_a_400_that_says_why(viewer: Client, runner: JobRunner):
    response = viewer.get(f"{API}/jobs", {"tag": "no spaces"})
    page = viewer.get(reverse("millrace_dashboard:jobs"), {"tag": "x" * 65})

    assert response.status_code == 400
    assert "letters, digits and _ - . : only" in response.content.decode()
    assert page.status_code == 400
    assert "at most 64 characters" in page.content.decode()
