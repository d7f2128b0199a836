"""Job checkpoints and duplicate policies end to end on SQLite (the test database),
through the ORM storage: the client, the runner's claims and retries, the stored row."""

from __future__ import annotations

from datetime import timedelta

import pytest

from millrace_django.contract import JobState
from millrace_django.errors import IdempotencyKeyHeld
from millrace_django.models import Job
from millrace_django.testing import JobRunner
from tests.unit.runtime import jobs
from tests.unit.runtime.jobs import board

pytest_plugins = ["millrace_django.pytest_plugin"]
pytestmark = pytest.mark.django_db


def test_a_retry_resumes_from_the_checkpoint_stored_in_the_jobs_row(
    millrace_orm: JobRunner,
) -> None:
    board.reset()
    job_id = jobs.resumable.enqueue(8, 5)
    millrace_orm.run_until_idle()
    assert Job.objects.get(uuid=job_id).checkpoint == 5
    millrace_orm.advance(timedelta(seconds=10))
    millrace_orm.run_until_idle()
    assert millrace_orm.assert_succeeded(job_id).result == 5
    assert board.calls == [("resumable", 1, 0), ("resumable", 2, 5)]
    assert Job.objects.get(uuid=job_id).checkpoint == 8


def test_reject_and_replace_meet_the_holder_in_the_database(millrace_orm: JobRunner) -> None:
    holder = jobs.record.schedule("first", delay=timedelta(hours=1), idempotency_key="k")
    with pytest.raises(IdempotencyKeyHeld) as raised:
        jobs.record.enqueue("second", idempotency_key="k", on_duplicate="reject")
    assert raised.value.holder_id == holder
    assert jobs.record.enqueue("third", idempotency_key="k", on_duplicate="replace") == holder
    assert Job.objects.count() == 1
    millrace_orm.run_until_idle()
    done = millrace_orm.assert_succeeded(holder)
    assert (done.result, done.state) == ("third", JobState.SUCCEEDED)
