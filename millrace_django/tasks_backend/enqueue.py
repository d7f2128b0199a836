"""A ``task.enqueue()`` as a Millrace job: one job of the task runner, carrying the
task's queue, priority, ``run_after`` (as its due time) and Millrace options (retry
policy, timeout, idempotency key)."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.tasks import Task
from django.tasks.exceptions import InvalidTask
from django.utils import timezone
from django.utils.json import normalize_json

from millrace_django.contract import JobRecord, JobState, RetryKind, RetrySpec
from millrace_django.engine import (
    InvalidJobArguments,
    JobClient,
    Retry,
    UnknownQueue,
    validate_retry,
)
from millrace_django.tasks_backend.declared import declared_options
from millrace_django.tasks_backend.options import options_problems
from millrace_django.tasks_backend.runner import run_task
from millrace_django.tasks_backend.stored_call import StoredCall


@dataclass(frozen=True, slots=True)
class TaskJob:
    """The job to store for one task call, and the call as the job keeps it."""

    record: JobRecord
    call: StoredCall


def task_job(
    task: Task[Any, Any],
    args: Any,
    kwargs: Any,
    *,
    alias: str,
    alias_options: Mapping[str, Any],
    client: JobClient,
) -> TaskJob:
    """The job that runs ``task(*args, **kwargs)`` for the ``TASKS`` alias ``alias``;
    refuses arguments that do not fit the function or survive JSON, and a queue no
    worker serves (nothing is written)."""
    call_args: list[Any] = list(normalize_json(list(args)))  # type: ignore[arg-type]
    call_kwargs: dict[str, Any] = dict(normalize_json(dict(kwargs)))  # type: ignore[arg-type]
    _check_arguments(task, call_args, call_kwargs)
    call = StoredCall(
        task.module_path,
        call_args,
        call_kwargs,
        alias,
        task.run_after.isoformat() if task.run_after is not None else None,
        declared_options(task) or None,
    )
    due_at = _due_at(task.run_after, client)
    runner = run_task.using(
        queue=task.queue_name,
        priority=int(task.priority),
        retry=_retry_for(task, alias, alias_options, client.config.default_retry),
        timeout=getattr(task, "timeout", None),
        idempotency_key=getattr(task, "idempotency_key", None),
        retry_on=getattr(task, "retry_on", None),
        give_up_on=getattr(task, "give_up_on", None),
    )
    try:
        record = client.build(
            runner,
            (),
            call.job_kwargs(),
            state=JobState.ENQUEUED if due_at is None else JobState.SCHEDULED,
            key=None,
            due_at=due_at,
        )
    except UnknownQueue as error:
        raise InvalidTask(
            f"Queue '{task.queue_name}' is not served by Millrace: {error}. "
            "Add it to MILLRACE['QUEUES']."
        ) from error
    return TaskJob(record, call)


def _retry_for(
    task: Task[Any, Any], alias: str, alias_options: Mapping[str, Any], default: RetrySpec
) -> RetrySpec:
    """The task's policy, else the alias's ``OPTIONS['RETRY']``, else ``default``; with
    ``max_attempts`` applied on top."""
    base = getattr(task, "retry", None) or _options_retry(alias, alias_options) or default
    max_attempts: int | None = getattr(task, "max_attempts", None)
    if max_attempts is None:
        return base
    if max_attempts == 1:
        return Retry.none()
    if base.kind is RetryKind.NONE:
        return Retry.exponential(max_attempts)
    return validate_retry(replace(base, max_attempts=max_attempts))


def _options_retry(alias: str, options: Mapping[str, Any]) -> RetrySpec | None:
    problems = options_problems(options)
    if problems:
        raise ImproperlyConfigured(f"TASKS[{alias!r}]: {' '.join(problems)}")
    retry: RetrySpec | None = options.get("RETRY")
    return retry


def _check_arguments(task: Task[Any, Any], args: list[Any], kwargs: dict[str, Any]) -> None:
    """Refuse a call that does not fit the function at enqueue, not on the worker."""
    signature = inspect.signature(task.func)
    parameters = list(signature.parameters.values())
    if task.takes_context:
        parameters = parameters[1:]
    try:
        signature.replace(parameters=parameters).bind(*args, **kwargs)
    except TypeError as error:
        raise InvalidJobArguments(f"cannot enqueue {task.module_path}: {error}") from None


def _due_at(run_after: datetime | None, client: JobClient) -> datetime | None:
    """When a deferred task becomes due; ``None`` when it is due now."""
    if run_after is None:
        return None
    aware = run_after if timezone.is_aware(run_after) else timezone.make_aware(run_after)
    if aware <= client.clock.now():
        return None
    return aware.astimezone(UTC)
