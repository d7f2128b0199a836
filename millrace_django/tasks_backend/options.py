"""The options Millrace adds to ``django.tasks``: per task (:class:`MillraceTask`, the
backend's ``task_class``) and per ``TASKS`` alias (``OPTIONS``)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.tasks import Task

from millrace_django.contract import RetrySpec
from millrace_django.engine import InvalidRetry, validate_retry
from millrace_django.engine.retry import ExceptionClasses, exception_classes

if TYPE_CHECKING:
    _TaskBase = Task[Any, Any]
else:
    _TaskBase = Task

OPTION_NAMES = frozenset({"RETRY"})
"""Keys ``TASKS[alias]["OPTIONS"]`` accepts."""


@dataclass(frozen=True, slots=True, kw_only=True)
class MillraceTask(_TaskBase):
    """A ``django.tasks.Task`` with Millrace's per-task options, given to ``@task(...)``
    (Django 6.1 forwards extra keywords to the backend's ``task_class``) or to
    ``using(...)``:

    - ``max_attempts``: runs in all, the first included (``1``: never retried); applied
      to ``retry`` or to the default policy;
    - ``retry``: a policy from :class:`millrace_django.Retry`;
    - ``timeout``: a ``timedelta`` (or seconds) after which a run counts as failed;
    - ``idempotency_key``: while a job holding this key is waiting or running,
      enqueueing again returns that job's result instead of storing another;
    - ``retry_on`` and ``give_up_on``: exception classes (one or a tuple) that decide
      which failures the policy may retry, as on ``@job``.
    """

    max_attempts: int | None = None
    retry: RetrySpec | None = None
    timeout: timedelta | None = None
    idempotency_key: str | None = None
    retry_on: ExceptionClasses | None = None
    give_up_on: ExceptionClasses | None = None

    def __post_init__(self) -> None:
        timeout: object = self.timeout
        if type(timeout) in (int, float) and math.isfinite(timeout):  # type: ignore[arg-type]
            object.__setattr__(self, "timeout", timedelta(seconds=timeout))  # type: ignore[arg-type]
        for option in ("retry_on", "give_up_on"):
            if isinstance(getattr(self, option), type):  # one class: as a tuple, like @job
                object.__setattr__(self, option, (getattr(self, option),))
        Task.__post_init__(self)  # zero-argument super() does not work in slotted dataclasses

    def using(  # type: ignore[override]
        self,
        *,
        priority: int | None = None,
        queue_name: str | None = None,
        run_after: datetime | None = None,
        backend: str | None = None,
        max_attempts: int | None = None,
        retry: RetrySpec | None = None,
        timeout: timedelta | float | None = None,
        idempotency_key: str | None = None,
        retry_on: ExceptionClasses | None = None,
        give_up_on: ExceptionClasses | None = None,
    ) -> MillraceTask:
        """This task with other options (``None`` keeps the current value)."""
        changes: dict[str, Any] = {
            "priority": priority,
            "queue_name": queue_name,
            "run_after": run_after,
            "backend": backend,
            "max_attempts": max_attempts,
            "retry": retry,
            "timeout": timeout,
            "idempotency_key": idempotency_key,
            "retry_on": retry_on,
            "give_up_on": give_up_on,
        }
        return replace(
            self, **{name: value for name, value in changes.items() if value is not None}
        )


def option_problem(task: Task[Any, Any]) -> str | None:
    """Why the task's Millrace options are unusable, or ``None``."""
    max_attempts = getattr(task, "max_attempts", None)
    if max_attempts is not None and (type(max_attempts) is not int or max_attempts < 1):
        return f"max_attempts must be an integer of at least 1; got {max_attempts!r}."
    retry = getattr(task, "retry", None)
    if retry is not None:
        if not isinstance(retry, RetrySpec):
            return f"retry must be a policy from millrace_django.Retry; got {retry!r}."
        try:
            validate_retry(retry)
        except InvalidRetry as error:
            return f"retry is invalid: {error}."
    timeout = getattr(task, "timeout", None)
    if timeout is not None and (not isinstance(timeout, timedelta) or timeout <= timedelta(0)):
        return f"timeout must be a positive timedelta or number of seconds; got {timeout!r}."
    key = getattr(task, "idempotency_key", None)
    if key is not None and (not isinstance(key, str) or not key.strip()):
        return f"idempotency_key must be a non-blank string; got {key!r}."
    for option in ("retry_on", "give_up_on"):
        classes = getattr(task, option, None)
        if classes is not None:
            try:
                exception_classes(option, classes)
            except InvalidRetry as error:
                return f"{error}."
    return None


def options_problems(options: Mapping[str, Any]) -> list[str]:
    """What is wrong with a backend's ``OPTIONS`` (empty when nothing is)."""
    if not isinstance(options, Mapping):
        return [f"OPTIONS must be a dict; got {options!r}."]
    problems = [
        f"OPTIONS has an unknown key {key!r}; known: {', '.join(sorted(OPTION_NAMES))}."
        for key in options
        if key not in OPTION_NAMES
    ]
    retry = options.get("RETRY")
    if retry is not None:
        if not isinstance(retry, RetrySpec):
            problems.append(
                f"OPTIONS['RETRY'] must be a policy from millrace_django.Retry; got {retry!r}."
            )
        else:
            try:
                validate_retry(retry)
            except InvalidRetry as error:
                problems.append(f"OPTIONS['RETRY'] is invalid: {error}.")
    return problems
