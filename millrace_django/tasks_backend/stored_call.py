"""A task call as its job's arguments keep it, and the task object read back from them.

The job of every enqueued task runs the task runner with keyword arguments only: the
task's module path, its JSON arguments, the backend alias, and the ``run_after`` and
declared options (:mod:`~millrace_django.tasks_backend.declared`) the job itself does
not keep as the task gave them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from datetime import datetime
from typing import Any

from django.tasks import Task
from django.tasks.exceptions import InvalidTask
from django.utils.module_loading import import_string

from millrace_django.contract import JobDetails
from millrace_django.engine import UnresolvableTarget
from millrace_django.tasks_backend.declared import declared_changes
from millrace_django.tasks_backend.options import MillraceTask


@dataclass(frozen=True, slots=True)
class StoredCall:
    """What the task runner's job was enqueued with."""

    task_path: str
    args: list[Any]
    kwargs: dict[str, Any]
    backend: str
    run_after: str | None = None
    """``Task.run_after`` in ISO 8601, as the task declared it."""
    options: dict[str, Any] | None = None
    """The options the task declared that the job keeps only resolved."""

    def job_kwargs(self) -> dict[str, Any]:
        """The runner's keyword arguments (``run_after`` and ``options`` only if set)."""
        stored: dict[str, Any] = {
            "task_path": self.task_path,
            "args": self.args,
            "kwargs": self.kwargs,
            "backend": self.backend,
        }
        if self.run_after is not None:
            stored["run_after"] = self.run_after
        if self.options:
            stored["options"] = self.options
        return stored

    @classmethod
    def from_job_kwargs(cls, stored: Mapping[str, Any]) -> StoredCall | None:
        """The call :meth:`job_kwargs` stored, or ``None`` if ``stored`` is not one."""
        task_path, args, kwargs = stored.get("task_path"), stored.get("args"), stored.get("kwargs")
        backend, run_after = stored.get("backend"), stored.get("run_after")
        options = stored.get("options")
        if not (
            isinstance(task_path, str)
            and isinstance(args, list)
            and isinstance(kwargs, dict)
            and isinstance(backend, str)
            and (run_after is None or isinstance(run_after, str))
            and (options is None or isinstance(options, dict))
        ):
            return None
        return cls(task_path, args, kwargs, backend, run_after, options)


def stored_task(call: StoredCall, details: JobDetails) -> Task[Any, Any]:
    """The task object the module defines, with the options it was enqueued with, as it
    declared them (equal to the task ``enqueue()`` was given)."""
    try:
        found = import_string(call.task_path)
    except ImportError as error:
        raise UnresolvableTarget(
            f"cannot import task {call.task_path!r} of job {details.summary.id}: {error} "
            "(renaming or moving a task while it is queued is a breaking deploy)"
        ) from error
    if not isinstance(found, Task):
        raise UnresolvableTarget(
            f"{call.task_path} (job {details.summary.id}) is not a task; decorate it with @task"
        )
    changes: dict[str, Any] = {
        "priority": details.summary.priority,
        "queue_name": details.summary.queue,
        "run_after": datetime.fromisoformat(call.run_after) if call.run_after else None,
        "backend": call.backend,
    }
    if isinstance(found, MillraceTask):
        changes.update(
            declared_changes(call.options or {}),
            timeout=details.timeout,
            idempotency_key=details.idempotency_key,
        )
    return _rebuild(found, changes)


def _rebuild(task: Task[Any, Any], changes: dict[str, Any]) -> Task[Any, Any]:
    """``task`` with ``changes``; unvalidated if today's settings would refuse it (a
    queue removed since the job was stored must not hide its result)."""
    try:
        return replace(task, **changes)
    except InvalidTask:
        copy = object.__new__(type(task))
        for field in fields(task):
            object.__setattr__(copy, field.name, changes.get(field.name, getattr(task, field.name)))
        return copy
