"""Job management through the configured client: ``from millrace_django import jobs``.

Thin functions over :class:`~millrace_django.engine.client.JobClient`, so application
code never wires storage itself. ``get`` has an async twin, ``aget``, run the way Django
runs its own async APIs (``sync_to_async``, thread-sensitive).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any
from uuid import UUID

from asgiref.sync import sync_to_async

from millrace_django.engine.client import Batch
from millrace_django.engine.default_client import default_client
from millrace_django.engine.registry import JobLike
from millrace_django.engine.status import JobStatus


def get(job_id: UUID | str) -> JobStatus | None:
    """The job's state, attempts, result and last error, as stored now; ``None`` for an
    unknown id (or one purged after its retention)."""
    return default_client().get(job_id)


async def aget(job_id: UUID | str) -> JobStatus | None:
    """:func:`get` from async code."""
    return await sync_to_async(get, thread_sensitive=True)(job_id)


def continue_with(parent_id: UUID, job: JobLike, /, *args: Any, **kwargs: Any) -> UUID:
    """Run ``job`` after ``parent_id`` succeeds; cancelled if the parent dies."""
    return default_client().continue_with(parent_id, job, *args, **kwargs)


def batch(
    on_complete: JobLike | None = None,
    *,
    on_complete_args: Sequence[Any] = (),
    on_complete_kwargs: Mapping[str, Any] | None = None,
) -> Batch:
    """``with jobs.batch() as b: b.enqueue(...)``: all jobs are stored together or none.

    ``on_complete=fn`` runs ``fn(*on_complete_args, **on_complete_kwargs, batch_id=...,
    succeeded=..., dead=..., cancelled=...)`` once every job of the batch is terminal."""
    return default_client().batch(
        on_complete, on_complete_args=on_complete_args, on_complete_kwargs=on_complete_kwargs
    )


def upsert_recurring(recurring_id: str, job: JobLike, /, **options: Any) -> None:
    """Create or update a cron definition (``cron=``, ``timezone=``, ``queue=``,
    ``priority=``, ``retry=``, ``args=``, ``kwargs=``, ``overlap=``); redeploying the same
    cron keeps its schedule."""
    default_client().upsert_recurring(recurring_id, job, **options)


def remove_recurring(recurring_id: str) -> bool:
    return default_client().remove_recurring(recurring_id)


def trigger_recurring(recurring_id: str) -> bool:
    """Enqueue one extra occurrence now; the schedule is untouched."""
    return default_client().trigger_recurring(recurring_id)


def disable_recurring(recurring_id: str) -> bool:
    """Stop a definition from firing until it is enabled; ``False`` if unknown."""
    return default_client().disable_recurring(recurring_id)


def enable_recurring(recurring_id: str) -> bool:
    """Let a disabled definition fire again from its next occurrence after now (those
    missed while disabled are dropped); ``False`` if unknown."""
    return default_client().enable_recurring(recurring_id)


def edit_recurring(recurring_id: str, **changes: Any) -> bool:
    """Change a definition's ``cron=``, ``timezone=``, ``args=``/``kwargs=`` (validated
    before anything is written); ``False`` if unknown."""
    return default_client().edit_recurring(recurring_id, **changes)


def cancel(job_id: UUID) -> bool:
    """Cancel a waiting job, or ask a running one to stop."""
    return default_client().cancel(job_id)


def run_now(job_id: UUID) -> bool:
    """Enqueue a scheduled job, or a failed one's retry, now instead of at its time."""
    return default_client().run_now(job_id)


def requeue(job_id: UUID) -> UUID | None:
    """Run a finished job again as a new job; ``None`` if the job is unknown."""
    return default_client().requeue(job_id)
