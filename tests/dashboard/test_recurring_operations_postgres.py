"""Operating recurring definitions on PostgreSQL, end to end: through the API, a disabled
definition is not fired by a scheduler pass and an enabled one is; an edit holding a NUL
character (which PostgreSQL refuses in any text or ``jsonb``) is a 400, never a 500.

Configured by MILLRACE_TEST_POSTGRES_URL (``scripts/testdb.sh`` starts a throwaway server);
skipped when unset, except in CI, where it fails.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.test import Client

from millrace_django.contract import JobState
from millrace_django.runtime.scheduler import fire_due_recurring
from millrace_django.testing import JobRunner
from tests.conformance.django_harness import server_marks
from tests.dashboard.sample import World
from tests.dashboard.test_api import post

pytestmark = server_marks("postgres", "MILLRACE_TEST_POSTGRES_URL", with_default=True)


@pytest.fixture
def runner(postgres_runner: JobRunner) -> JobRunner:
    """The world (conftest.py) is seeded on PostgreSQL."""
    return postgres_runner


def _fired(runner: JobRunner, world: World) -> int:
    return sum(job.recurring_id == world.recurring_id for job in runner.jobs(JobState.ENQUEUED))


def test_a_disabled_definition_does_not_fire_and_an_enabled_one_does(
    operator: Client, world: World, runner: JobRunner
):
    def fire(at: datetime) -> int:
        return fire_due_recurring(runner.storage, runner.clock, at, 10)

    before = _fired(runner, world)
    now = datetime.now(UTC)  # the dashboard's clock: real time
    assert post(operator, f"/recurring/{world.recurring_id}/disable").status_code == 200

    assert fire(now + timedelta(days=2)) == 0
    assert post(operator, f"/recurring/{world.recurring_id}/enable").status_code == 200
    assert fire(now) == 0
    assert fire(now + timedelta(days=1, minutes=1)) == 1

    assert _fired(runner, world) == before + 1


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"cron": "0 3 * * *\x00"}, "cron"),
        ({"timezone": "UTC\x00"}, "timezone"),
        ({"kwargs": {"note": "a\x00b"}}, "arguments"),
    ],
)
def test_an_edit_holding_a_nul_character_is_a_400_and_changes_nothing(
    operator: Client, world: World, runner: JobRunner, body: dict[str, object], field: str
):
    before = runner.storage.get_recurring(world.recurring_id)

    response = post(operator, f"/recurring/{world.recurring_id}/edit", body)

    assert response.status_code == 400
    assert field in response.json()["errors"]
    assert runner.storage.get_recurring(world.recurring_id) == before
