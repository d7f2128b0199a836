"""List filters (django-filter) and keyset paging: validated input, 400 on bad input."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from urllib.parse import urlencode

import pytest
from django.test import Client
from django.urls import reverse

from tests.dashboard.sample import World


def job_rows(client: Client, query: dict[str, object] | str = "") -> list[str]:
    encoded = query if isinstance(query, str) else urlencode(query, doseq=True)
    response = client.get(reverse("millrace_dashboard:jobs") + "?" + encoded)
    assert response.status_code == 200, response.content[:800]
    return re.findall(r'<tr data-job="([^"]+)"', response.content.decode())


def test_filters_by_one_or_several_states(operator: Client, world: World):
    assert job_rows(operator, {"state": "dead"})[-1] == str(world.dead)
    both = job_rows(operator, {"state": ["scheduled", "awaiting"]})
    assert set(both) == {str(world.scheduled), str(world.parent), str(world.awaiting)}


def test_filters_by_queue_tenant_and_untenanted(operator: Client, world: World):
    assert set(job_rows(operator, {"queue": "reports", "state": "enqueued"})) == {
        str(world.enqueued)
    }
    assert job_rows(operator, {"tenant": "acme"}) == [str(world.tenanted)]
    untenanted = job_rows(operator, {"untenanted": "on", "queue": "emails", "state": "enqueued"})
    assert untenanted == []  # the only enqueued email belongs to acme
    assert job_rows(operator, {"untenanted": "on", "tenant": "acme"}) != [str(world.tenanted)]


def test_filters_by_created_range_lower_inclusive_upper_exclusive(operator, world, runner):
    created = runner.get(world.enqueued).created_at
    exactly = {
        "created_after": created.isoformat(),
        "created_before": (created + timedelta(microseconds=1)).isoformat(),
    }
    rows = job_rows(operator, exactly)
    assert str(world.enqueued) in rows
    assert (
        job_rows(
            operator,
            {"created_before": created.isoformat(), "state": "enqueued", "queue": "reports"},
        )
        == []
    )


def test_the_browser_datetime_input_is_read_in_the_current_time_zone(operator, world):
    future = (datetime.now(UTC) + timedelta(days=1)).strftime("%Y-%m-%dT%H:%M")
    assert job_rows(operator, {"created_after": future}) == []
    page = operator.get(reverse("millrace_dashboard:jobs") + f"?created_after={future}")
    assert f'value="{future}"' in page.content.decode()


def test_keyset_pages_walk_every_job_once_without_totals(operator: Client, world: World, runner):
    seen: list[str] = []
    url = reverse("millrace_dashboard:jobs") + "?limit=3"
    pages = 0
    while url:
        page = operator.get(url).content.decode()
        seen += re.findall(r'<tr data-job="([^"]+)"', page)
        found = re.search(r'href="([^"]+)" id="mr-next"', page)
        url = (
            reverse("millrace_dashboard:jobs") + found.group(1).replace("&amp;", "&")
            if found
            else ""
        )
        pages += 1
        assert " of " not in page.split('id="mr-jobs"')[1].split("</table>")[0]
    assert len(seen) == len(set(seen)) == len(runner.jobs()) == 14
    assert pages >= 5


@pytest.mark.parametrize("name", ["jobs", "recurring", "instances"])
@pytest.mark.parametrize("cursor", ["not-a-cursor", "!!not-a-cursor!!", "%%%", " ", "a"])
def test_a_bad_cursor_is_a_400_never_a_restart(operator: Client, world, name: str, cursor: str):
    response = operator.get(reverse(f"millrace_dashboard:{name}"), {"cursor": cursor})
    assert response.status_code == 400
    page = response.content.decode()
    assert "Invalid paging cursor" in page
    assert "data-job=" not in page and "data-instance=" not in page


def test_a_cursor_of_another_list_is_rejected(operator: Client, world: World):
    page = operator.get(reverse("millrace_dashboard:jobs") + "?limit=2").content.decode()
    cursor = re.search(r"cursor=([^&\"]+)", page).group(1)
    response = operator.get(reverse("millrace_dashboard:recurring") + f"?cursor={cursor}")
    assert response.status_code == 400


@pytest.mark.parametrize(
    ("name", "query"),
    [
        ("jobs", "state=exploded"),
        ("jobs", "created_after=yesterday"),
        ("jobs", "limit=ten"),
        ("instances", "version=one&definition=dash-order"),
        ("instances", "state=running&state=bogus"),
        ("instances", "version=0&definition=dash-order"),
        ("overview", "untenanted=on&tenant=" + "x" * 5),
    ],
)
def test_invalid_filters_are_a_400_with_the_reason(operator: Client, world, name: str, query: str):
    response = operator.get(reverse(f"millrace_dashboard:{name}") + "?" + query)
    if name == "overview":
        assert response.status_code == 200  # a valid combination: untenanted wins
        return
    assert response.status_code == 400
    assert (
        'class="errorlist' in response.content.decode()
        or "Invalid paging" in response.content.decode()
    )


def test_the_limit_is_clamped_not_rejected(operator: Client, world: World):
    assert len(job_rows(operator, {"limit": "0"})) == len(job_rows(operator, {"limit": "10000"}))
    assert len(job_rows(operator, {"limit": "-5"})) == 14


def test_instances_filter_by_definition_version_and_state(operator: Client, world: World):
    def rows(query: dict[str, str]) -> list[str]:
        page = operator.get(reverse("millrace_dashboard:instances"), query).content.decode()
        return re.findall(r'<tr data-instance="([^"]+)"', page)

    assert rows({"definition": "dash-order"}) == [str(world.waiting_instance)]
    assert rows({"definition": "dash-order", "version": "2"}) == []
    assert rows({"version": "2"}) != []  # a version alone is ignored
    assert rows({"state": "completed"}) == []
    assert len(rows({"state": "suspended"})) == 2


def test_recurring_filter_by_queue_and_tenant(operator: Client, world: World):
    def rows(query: dict[str, str]) -> list[str]:
        page = operator.get(reverse("millrace_dashboard:recurring"), query).content.decode()
        return re.findall(r'<tr data-recurring="([^"]+)"', page)

    assert rows({}) == ["nightly-cleanup"]
    assert rows({"queue": "emails"}) == []
    assert rows({"tenant": "acme"}) == []
    assert rows({"untenanted": "on"}) == ["nightly-cleanup"]
