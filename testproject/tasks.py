"""Django Tasks (``django.tasks``) run by Millrace, next to the ``@job`` examples in
``sample/jobs.py``.

These are plain ``@task`` functions: with ``TASKS`` naming
``millrace_django.tasks_backend.MillraceBackend`` (see ``docs/django-tasks.md``), each
``enqueue()`` stores a Millrace job that any ``manage.py millrace_worker`` runs, and the
dashboard lists it like any other job. The keywords ``max_attempts``, ``retry``,
``timeout`` and ``idempotency_key`` are Millrace's per-task options, which Django 6.1
passes on to the backend's task class.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import timedelta
from typing import Any

from django.tasks import TaskContext, TaskResult, task
from django.utils import timezone

from millrace_django import Retry

logger = logging.getLogger(__name__)


@task
def send_welcome_email(user_id: int) -> str:
    """Fire-and-forget: runs as soon as a worker is free."""
    logger.info("welcome, user %s", user_id)
    return f"welcome email sent to user {user_id}"


@task(queue_name="emails", priority=50)
def send_password_reset(email: str) -> str:
    """A queue and a priority: runs before the queue's priority-0 tasks."""
    return f"password reset sent to {email}"


@task(takes_context=True, retry=Retry.fixed(timedelta(seconds=1), max_attempts=3))
def sync_partner(context: TaskContext, account: str) -> str:
    """Retry then success: the first attempt fails, the retry a second later succeeds."""
    if context.attempt < 2:
        raise ConnectionError(f"the partner API timed out for {account}")
    return f"{account} synced on attempt {context.attempt}"


@task(max_attempts=1)
def import_spreadsheet(path: str) -> None:
    """Failure: never retried, so the result is FAILED after one attempt."""
    raise ValueError(f"{path}: line 1: not a CSV file")


@task(queue_name="reports", timeout=timedelta(minutes=5))
async def monthly_report(month: str) -> dict[str, Any]:
    """Async, with a timeout: a run past five minutes counts as failed."""
    await asyncio.sleep(0.2)
    return {"month": month, "orders": 42}


@task(queue_name="reports")
def nightly_export(day: str) -> str:
    """Deduplicated by an idempotency key given at enqueue (see :func:`enqueue_samples`)."""
    return f"export of {day} written"


def enqueue_samples() -> dict[str, TaskResult[Any, Any]]:
    """One task of every shape; returns their results by shape (ids are job ids)."""
    today = timezone.now().date().isoformat()
    export = nightly_export.using(idempotency_key=f"export-{today}")
    return {
        "task": send_welcome_email.enqueue(42),
        "task, deferred": send_password_reset.using(
            run_after=timezone.now() + timedelta(seconds=3)
        ).enqueue("ada@example.com"),
        "task, retry then success": sync_partner.enqueue("acme"),
        "task, failure": import_spreadsheet.enqueue("uploads/orders.xlsx"),
        "task, async": monthly_report.enqueue("2026-11"),
        "task, idempotent": export.enqueue(today),
        "task, idempotent again (same result)": export.enqueue(today),
    }
