"""The Prometheus endpoint: the dashboard's authorization, then the read model as text."""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth.models import Permission, User
from django.http import HttpRequest
from django.test import Client
from django.urls import reverse

from millrace_django.clock import FakeClock
from millrace_django.contract import JobState, WorkerHeartbeat
from millrace_django.dashboard.authorization import staff_with_permissions
from millrace_django.engine import JobClient
from millrace_django.observability.prometheus import Family, render
from millrace_django.storage.orm import DjangoStorage
from tests.observability.exposition import parse
from tests.unit.observability import jobs

TOKEN = "scrape-token-123"


def scraper_or_staff(request: HttpRequest) -> bool:
    """A policy letting in a scraper that presents the token, and staff as usual."""
    return request.headers.get("Authorization") == f"Bearer {TOKEN}" or (
        staff_with_permissions(request)
    )


@pytest.fixture(autouse=True)
def policy(settings: pytest.FixtureRequest) -> None:
    settings.MILLRACE_DASHBOARD = {"AUTHORIZE": scraper_or_staff}  # type: ignore[attr-defined]


def login(*codenames: str, superuser: bool = False) -> Client:
    user = User.objects.create_user(
        f"user-{len(codenames)}-{superuser}", is_staff=True, is_superuser=superuser
    )
    for codename in codenames:
        user.user_permissions.add(
            Permission.objects.get(content_type__app_label="millrace_django", codename=codename)
        )
    client = Client()
    client.force_login(user)
    return client


URL = "/admin/millrace/metrics"


@pytest.mark.django_db
def test_the_endpoint_is_mounted_with_the_dashboard() -> None:
    assert reverse("millrace_dashboard:metrics") == URL


@pytest.mark.django_db
@pytest.mark.parametrize(
    "who",
    ["anonymous", "wrong token", "staff without permissions", "staff without view_job"],
)
def test_a_denied_request_gets_the_dashboards_plain_404(who: str) -> None:
    clients: dict[str, Callable[[], Client]] = {
        "anonymous": Client,
        "wrong token": lambda: Client(headers={"Authorization": "Bearer guess"}),
        "staff without permissions": lambda: login(),
        "staff without view_job": lambda: login("view_recurring"),
    }
    client = clients[who]()
    response = client.get(URL)
    unknown = client.get("/admin/millrace/no-such-page/")
    assert response.status_code == 404
    assert response["Content-Type"] == unknown["Content-Type"]
    assert b"millrace_" not in response.content


@pytest.mark.django_db
def test_only_get_and_head_are_allowed() -> None:
    assert login("view_job").post(URL).status_code == 405


@pytest.mark.django_db
def test_the_figures_come_from_the_read_model_in_the_text_format() -> None:
    now = datetime.now(UTC)
    clock = FakeClock(now - timedelta(hours=1))
    storage = DjangoStorage("default", clock)
    from millrace_django.conf import get_settings

    client = JobClient(storage, clock, get_settings())
    client.enqueue(jobs.chatty.using(queue="emails"), "a")
    clock.advance(timedelta(minutes=30))
    client.enqueue(jobs.chatty.using(queue="emails"), "b")
    assert client.cancel(client.enqueue(jobs.chatty, "c"))
    client.upsert_recurring("every-minute", jobs.chatty, cron="* * * * *", args=["r"])
    next_fire = storage.get_recurring("every-minute").next_fire_time  # type: ignore[union-attr]
    storage.pause_queue("emails")
    storage.pause_queue("retired")  # paused once, no longer configured
    storage.record_worker_heartbeat(heartbeat("alive", seen=now, in_flight=3))
    storage.record_worker_heartbeat(heartbeat("gone", seen=now - timedelta(hours=1), in_flight=9))

    response = Client(headers={"Authorization": f"Bearer {TOKEN}"}).get(URL)
    scraped = datetime.now(UTC)

    assert response.status_code == 200
    assert response["Content-Type"] == "text/plain; version=0.0.4; charset=utf-8"
    metrics = parse(response.content.decode())
    assert all(metric.kind == "gauge" and metric.help for metric in metrics.values())
    by_state = metrics["millrace_jobs"].samples
    assert by_state == {
        (("state", state.value),): {JobState.ENQUEUED: 2, JobState.CANCELLED: 1}.get(state, 0)
        for state in JobState
    }
    assert metrics["millrace_queue_depth"].samples == {
        (("queue", "default"),): 0,
        (("queue", "emails"),): 2,
        (("queue", "reports"),): 0,
    }
    ages = metrics["millrace_queue_oldest_job_age_seconds"].samples
    assert ages[(("queue", "default"),)] == ages[(("queue", "reports"),)] == 0
    oldest = ages[(("queue", "emails"),)]
    assert 3600 <= oldest <= (scraped - (now - timedelta(hours=1))).total_seconds()
    assert metrics["millrace_recurring_definitions"].samples == {(): 1}
    lag = metrics["millrace_recurring_next_fire_lag_seconds"].samples[()]
    assert (now - next_fire).total_seconds() <= lag <= (scraped - next_fire).total_seconds()
    assert metrics["millrace_recurring_overdue_definitions"].samples == {(): 1}
    assert metrics["millrace_workers"].samples == {
        (("status", "alive"),): 1,
        (("status", "gone"),): 1,
    }
    assert metrics["millrace_workers_in_flight_jobs"].samples == {(): 3}
    assert metrics["millrace_workers_concurrency"].samples == {(): 4}
    assert metrics["millrace_queue_paused"].samples == {
        (("queue", "default"),): 0,
        (("queue", "emails"),): 1,
        (("queue", "reports"),): 0,
        (("queue", "retired"),): 1,
    }


@pytest.mark.django_db
def test_a_user_holding_view_job_may_read_it_too() -> None:
    response = login("view_job").get(URL)
    assert response.status_code == 200
    assert "millrace_jobs" in parse(response.content.decode())


def test_label_values_and_help_texts_are_escaped() -> None:
    family = Family("millrace_test", "help with \\ and\nnewline")
    family.add(1.5, queue='we"ird\\queue\nname')
    family.add(math.inf, queue="plain")
    family.add(7)
    text = render([family])
    assert text.splitlines()[0] == "# HELP millrace_test help with \\\\ and\\nnewline"
    assert 'millrace_test{queue="we\\"ird\\\\queue\\nname"} 1.5' in text.splitlines()
    assert parse(text)["millrace_test"].samples == {
        (("queue", 'we"ird\\queue\nname'),): 1.5,
        (("queue", "plain"),): math.inf,
        (): 7.0,
    }


def heartbeat(worker_id: str, *, seen: datetime, in_flight: int) -> WorkerHeartbeat:
    return WorkerHeartbeat(
        worker_id=worker_id,
        hostname="host",
        pid=1,
        queues=frozenset({"default"}),
        concurrency=4,
        in_flight=in_flight,
        started_at=seen,
        seen_at=seen,
    )
