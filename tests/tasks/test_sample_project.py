"""The sample project's ``@task`` examples (``testproject/tasks.py``) end as their
docstrings say, and their jobs are listed with every other job."""

from __future__ import annotations

from datetime import timedelta
from uuid import UUID

from django.tasks import TaskResultStatus
from django.utils import timezone

from millrace_django.contract import JobQuery
from millrace_django.storage.memory import MemoryStorage
from millrace_django.tasks_backend import RUN_TASK_TARGET
from millrace_django.tasks_backend.attempts import TaskAttempts
from millrace_django.testing import RUNNER_ID, JobRunner


def test_the_sample_tasks_end_as_documented(runner: JobRunner) -> None:
    from testproject import tasks as sample  # decorated under the tests' TASKS

    runner.clock.set(timezone.now())  # the samples defer by timezone.now()

    created = sample.enqueue_samples()
    assert created["task, idempotent"].id == created["task, idempotent again (same result)"].id
    runner.run_until_idle(throw_on_failure=False)
    for _ in range(4):
        runner.advance(timedelta(seconds=1))
        runner.run_until_idle(throw_on_failure=False)

    for result in created.values():
        result.refresh()
    statuses = {shape: result.status for shape, result in created.items()}
    assert statuses == {
        "task": TaskResultStatus.SUCCESSFUL,
        "task, deferred": TaskResultStatus.SUCCESSFUL,
        "task, retry then success": TaskResultStatus.SUCCESSFUL,
        "task, failure": TaskResultStatus.FAILED,
        "task, async": TaskResultStatus.SUCCESSFUL,
        "task, idempotent": TaskResultStatus.SUCCESSFUL,
        "task, idempotent again (same result)": TaskResultStatus.SUCCESSFUL,
    }
    assert created["task, retry then success"].return_value == "acme synced on attempt 2"
    assert created["task, async"].return_value == {"month": "2026-11", "orders": 42}
    assert created["task, failure"].errors[0].exception_class is ValueError
    assert sample.send_welcome_email.get_result(created["task"].id).return_value == (
        "welcome email sent to user 42"
    )

    storage = runner.storage
    assert isinstance(storage, MemoryStorage)
    listed = storage.query_jobs(JobQuery()).items
    assert {str(job.id) for job in listed} == {result.id for result in created.values()}
    assert {job.target for job in listed} == {RUN_TASK_TARGET}
    details = storage.get_job_details(UUID(created["task"].id))
    assert details is not None
    assert details.invocation.kwargs["task_path"] == "testproject.tasks.send_welcome_email"
    attempts = TaskAttempts.from_checkpoint(details.checkpoint)  # the job page shows it
    assert [(a.number, a.worker_id, a.raised) for a in attempts.attempts] == [(1, RUNNER_ID, None)]
