"""Django's ``TaskResult`` read from a Millrace job: its state, times, workers, errors
and return value."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import UUID

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.tasks import Task, TaskResult, TaskResultStatus
from django.utils import timezone

from millrace_django.contract import (
    TERMINAL_JOB_STATES,
    JobDetails,
    JobState,
    JobStorage,
    MonitoringStorage,
)
from millrace_django.tasks_backend.attempts import TaskAttempts
from millrace_django.tasks_backend.stored_call import StoredCall
from millrace_django.tasks_backend.task_errors import task_errors

STATUSES: dict[JobState, TaskResultStatus] = {
    JobState.SCHEDULED: TaskResultStatus.READY,
    JobState.ENQUEUED: TaskResultStatus.READY,
    JobState.AWAITING: TaskResultStatus.READY,
    JobState.FAILED: TaskResultStatus.READY,  # a retry is waiting for its turn
    JobState.PROCESSING: TaskResultStatus.RUNNING,
    JobState.SUCCEEDED: TaskResultStatus.SUCCESSFUL,
    JobState.DEAD: TaskResultStatus.FAILED,
    JobState.CANCELLED: TaskResultStatus.FAILED,
}
"""Millrace's job states onto Django's four statuses."""


def enqueued_result(
    task: Task[Any, Any], job_id: UUID, created_at: datetime, call: StoredCall
) -> TaskResult[Any, Any]:
    """The result of a task just stored: ready, never started."""
    return TaskResult(
        task=task,
        id=str(job_id),
        status=TaskResultStatus.READY,
        enqueued_at=local(created_at),
        started_at=None,
        finished_at=None,
        last_attempted_at=None,
        args=call.args,
        kwargs=call.kwargs,
        backend=call.backend,
        errors=[],
        worker_ids=[],
    )


def task_result(
    task: Task[Any, Any], details: JobDetails, call: StoredCall, attempts: TaskAttempts
) -> TaskResult[Any, Any]:
    """The result of a stored task, from its job and the attempts its runner recorded."""
    summary = details.summary
    started = attempts.attempts
    finished_at = summary.finished_at if summary.state in TERMINAL_JOB_STATES else None
    result: TaskResult[Any, Any] = TaskResult(
        task=task,
        id=str(summary.id),
        status=STATUSES[summary.state],
        enqueued_at=local(summary.created_at),
        started_at=local(started[0].started_at) if started else None,
        last_attempted_at=local(started[-1].started_at) if started else None,
        finished_at=local(finished_at) if finished_at is not None else None,
        args=call.args,
        kwargs=call.kwargs,
        backend=call.backend,
        errors=task_errors(
            summary.state, details.attempts, details.last_error, attempts.raised_by_number
        ),
        worker_ids=[attempt.worker_id for attempt in started],
    )
    if summary.state is JobState.SUCCEEDED:
        object.__setattr__(result, "_return_value", details.result)
    return result


def job_details(storage: JobStorage, job_id: UUID) -> JobDetails | None:
    """The job behind a task result, read from the storage's monitoring read model."""
    if not isinstance(storage, MonitoringStorage):
        raise ImproperlyConfigured(
            f"{type(storage).__name__} has no monitoring read model, so task results "
            "cannot be read; use the 'orm' or 'memory' storage"
        )
    return storage.get_job_details(job_id)


def local(instant: datetime) -> datetime:
    """Storage times are aware UTC; with ``USE_TZ = False`` Django expects naive ones."""
    return instant if settings.USE_TZ else timezone.make_naive(instant)
