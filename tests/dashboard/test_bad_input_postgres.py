"""NUL characters at the dashboard's boundary, on PostgreSQL (which refuses them in any
text or ``jsonb``, with a ``DataError`` that surfaced as a 500): a name in the path or a
signal's payload holding one is a 400 that says why.

Configured by MILLRACE_TEST_POSTGRES_URL (``scripts/testdb.sh`` starts a throwaway server);
skipped when unset, except in CI, where it fails.
"""

from __future__ import annotations

import json

import pytest
from django.test import Client

from millrace_django.contract import InstanceState
from millrace_django.testing import JobRunner
from tests.conformance.django_harness import server_marks
from tests.dashboard.sample import World

pytestmark = server_marks("postgres", "MILLRACE_TEST_POSTGRES_URL", with_default=True)

BASE = "/admin/millrace/"
API = f"{BASE}api/v1"


@pytest.fixture
def runner(postgres_runner: JobRunner) -> JobRunner:
    """The world (conftest.py) is seeded on PostgreSQL."""
    return postgres_runner


@pytest.mark.parametrize(
    ("path", "label"),
    [
        ("/queues/emails%00/pause", "queue"),
        ("/recurring/nightly%00cleanup/trigger", "recurring id"),
        ("/signals/approved%00/order-1001", "name"),
        ("/signals/approved/order-1001%00", "correlation id"),
    ],
)
def test_a_nul_character_in_a_name_of_the_path_is_a_400_problem(
    operator: Client, world: World, path: str, label: str
):
    response = operator.post(API + path, "", content_type="application/json")
    assert response.status_code == 400
    assert response["Content-Type"] == "application/problem+json"
    assert response.json() == {
        "type": "about:blank",
        "title": "Invalid path parameter",
        "status": 400,
        "detail": f"The {label} in the URL contains a NUL character (%00), which no name holds.",
    }


@pytest.mark.parametrize("path", ["queues/emails%00/pause/", "recurring/nightly%00/trigger/"])
def test_a_nul_character_in_a_page_actions_path_is_a_400(operator: Client, world: World, path):
    response = operator.post(BASE + path)
    assert response.status_code == 400
    assert "contains a NUL character" in response.content.decode()


def test_a_nul_character_in_the_path_is_still_a_404_to_a_refused_visitor(client: Client, world):
    response = client.post(f"{API}/queues/emails%00/pause")
    assert response.status_code == 404


def test_a_signal_payload_holding_a_nul_character_is_a_400_and_the_instance_keeps_waiting(
    operator: Client, world: World, runner: JobRunner
):
    path = f"{API}/signals/approved/{world.order_id}"
    refused = operator.post(path, json.dumps({"note": "a\x00b"}), content_type="application/json")
    assert refused.status_code == 400
    assert "U+0000" in refused.json()["detail"]
    runner.assert_instance(world.waiting_instance, InstanceState.SUSPENDED)
    delivered = operator.post(path, json.dumps({"note": "ab"}), content_type="application/json")
    assert delivered.status_code == 200


def test_the_signal_form_refuses_a_payload_holding_a_nul_character(
    operator: Client, world: World, runner: JobRunner
):
    response = operator.post(
        f"{BASE}signals/",
        {"name": "approved", "correlation_id": world.order_id, "payload": '"a\\u0000b"'},
    )
    assert response.status_code == 400
    assert "U+0000" in response.content.decode()
    runner.assert_instance(world.waiting_instance, InstanceState.SUSPENDED)


def test_a_bulk_trigger_selecting_an_id_with_a_nul_character_does_nothing_and_says_why(
    operator: Client, world: World, runner: JobRunner
):
    before = len(runner.jobs())
    response = operator.post(
        f"{BASE}recurring/bulk/", {"ids": [world.recurring_id, "nightly\x00"]}, follow=True
    )
    assert response.status_code == 200
    assert "Nothing was done: ids: An id holds a NUL character" in response.content.decode()
    assert len(runner.jobs()) == before
