"""The Django side of the testing helpers: the pytest fixture, the TestCase mixin,
setting overrides, and the runner's clock keeping step with freezegun."""

from __future__ import annotations

import unittest
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.test import SimpleTestCase, override_settings
from django.utils import timezone
from freezegun import freeze_time

from millrace_django import job
from millrace_django.clock import FakeClock
from millrace_django.contract import JobState
from millrace_django.engine import default_client
from millrace_django.models import JOB_STATE_CODES, Job
from millrace_django.testing import FreezegunClock, JobRunner, JobRunnerMixin, project_runner

pytest_plugins = ["millrace_django.pytest_plugin"]


@job
def stamp_now() -> str:
    """What a user's job sees as "now"."""
    return timezone.now().isoformat()


@job(queue="emails")
def send(address: str) -> str:
    return f"sent to {address}"


def test_the_fixture_installs_a_runner_with_the_projects_settings(millrace: JobRunner) -> None:
    assert default_client() is millrace.client
    job_id = send.enqueue("a@example.com")  # "emails" is one of the project's queues
    assert millrace.run_until_idle() == 1
    assert millrace.assert_succeeded(job_id).result == "sent to a@example.com"


def test_a_project_runner_restores_the_previous_client_after_the_block() -> None:
    before = default_client()
    with project_runner() as runner:
        assert default_client() is runner.client
    assert default_client() is before


def test_a_settings_override_during_the_test_keeps_the_runner_installed(
    millrace: JobRunner, settings: Any
) -> None:
    settings.MILLRACE = {"QUEUES": ["default", "bulk"]}
    assert default_client() is millrace.client
    job_id = send.using(queue="bulk").enqueue("b@example.com")
    assert millrace.run_until_idle() == 1
    millrace.assert_succeeded(job_id)


def test_an_invalid_override_keeps_the_last_good_settings(millrace: JobRunner) -> None:
    with override_settings(MILLRACE={"QUEUES": []}):
        assert default_client() is millrace.client
        assert set(millrace.config.queues) >= {"default", "emails"}


@pytest.mark.django_db
def test_the_orm_fixture_stores_jobs_in_the_test_database(millrace_orm: JobRunner) -> None:
    job_id = send.enqueue("c@example.com")
    assert millrace_orm.run_until_idle() == 1
    row = Job.objects.get(uuid=job_id)
    assert row.state == JOB_STATE_CODES[JobState.SUCCEEDED]


class TestTheMixin(JobRunnerMixin, SimpleTestCase):
    def test_each_test_gets_an_installed_runner(self) -> None:
        assert default_client() is self.millrace.client
        job_id = send.enqueue("d@example.com")
        self.millrace.run_until_idle()
        self.millrace.assert_succeeded(job_id)


def test_the_mixin_restores_the_previous_client_after_each_test() -> None:
    seen: list[bool] = []

    class Probe(JobRunnerMixin, SimpleTestCase):
        def test_probe(self) -> None:
            seen.append(default_client() is self.millrace.client)

    before = default_client()
    result = unittest.TestResult()
    Probe("test_probe").run(result)
    assert result.wasSuccessful(), result.errors + result.failures
    assert seen == [True]
    assert default_client() is before


@freeze_time("2026-06-01 12:00:00")
def test_under_freezegun_a_job_reading_timezone_now_agrees_with_the_engine(
    millrace: JobRunner,
) -> None:
    noon = datetime(2026, 6, 1, 12, tzinfo=UTC)
    assert millrace.clock.now() == noon
    job_id = stamp_now.schedule(delay=timedelta(hours=1))
    assert millrace.run_until_idle() == 0
    millrace.advance(timedelta(hours=1))  # moves freezegun too
    assert timezone.now() == noon + timedelta(hours=1)
    assert millrace.run_until_idle() == 1
    assert millrace.assert_succeeded(job_id).result == (noon + timedelta(hours=1)).isoformat()


def test_freezegun_started_after_the_runner_is_followed_as_well(millrace: JobRunner) -> None:
    with freeze_time("2030-01-01 08:30:00") as frozen:
        assert millrace.clock.now() == datetime(2030, 1, 1, 8, 30, tzinfo=UTC)
        frozen.tick(timedelta(minutes=5))  # moving freezegun moves the runner's clock
        job_id = stamp_now.enqueue()
        millrace.run_until_idle()
        stored = millrace.assert_succeeded(job_id)
        assert stored.created_at == datetime(2030, 1, 1, 8, 35, tzinfo=UTC)
        assert stored.result == "2030-01-01T08:35:00+00:00"


def test_without_freezegun_the_clock_is_an_ordinary_fake_clock() -> None:
    clock = FreezegunClock()
    assert clock.now() == FakeClock.DEFAULT_START
    clock.advance(timedelta(days=1))
    assert clock.now() == FakeClock.DEFAULT_START + timedelta(days=1)
    with pytest.raises(ValueError, match="only moves forward"):
        clock.set(FakeClock.DEFAULT_START)


def test_under_freezegun_the_clock_refuses_to_move_back() -> None:
    clock = FreezegunClock()
    with freeze_time("2026-03-01"):
        clock.set(datetime(2026, 3, 2, tzinfo=UTC))
        assert timezone.now() == datetime(2026, 3, 2, tzinfo=UTC)
        with pytest.raises(ValueError, match="only moves forward"):
            clock.advance(timedelta(seconds=-1))
        with pytest.raises(ValueError, match="only moves forward"):
            clock.set(datetime(2026, 3, 1, tzinfo=UTC))
