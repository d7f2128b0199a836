"""A task's Millrace options as it declared them, kept with its job.

The job keeps the *resolved* retry policy (``max_attempts`` applied to the task's
``retry``, the alias's or the project's default), which cannot be read back into what
the task said: ``Retry.exponential(5)`` may be the default or the task's own choice.
``get_result`` must rebuild the very task ``enqueue()`` was given, so the options
that the job does not keep as declared (``retry`` and ``max_attempts``, and the retry
filters, which the policy keeps by class name) travel in the job's arguments;
``timeout`` and ``idempotency_key`` are stored as declared.
"""

from __future__ import annotations

import contextlib
from typing import Any

from django.utils.module_loading import import_string

from millrace_django.contract import JSON, retry_json, retry_of
from millrace_django.engine.retry import class_name

FILTERS = ("retry_on", "give_up_on")


def declared_options(task: object) -> dict[str, JSON]:
    """The options ``task`` sets that its job keeps only resolved (empty: none)."""
    stored: dict[str, JSON] = {}
    max_attempts = getattr(task, "max_attempts", None)
    if max_attempts is not None:
        stored["max_attempts"] = max_attempts
    retry = getattr(task, "retry", None)
    if retry is not None:
        stored["retry"] = retry_json(retry)
    for option in FILTERS:
        classes = getattr(task, option, None)
        if classes is not None:
            stored[option] = [class_name(cls) for cls in classes]
    return stored


def declared_changes(stored: dict[str, Any]) -> dict[str, Any]:
    """The task fields :func:`declared_options` stored, ``None`` for those it did not; a
    filter whose classes no longer import by name is left out (the task's own stands)."""
    retry = stored.get("retry")
    changes: dict[str, Any] = {
        "max_attempts": stored.get("max_attempts"),
        "retry": retry_of(retry) if retry is not None else None,
    }
    for option in FILTERS:
        names = stored.get(option)
        with contextlib.suppress(ImportError, TypeError):
            changes[option] = None if names is None else tuple(map(import_string, names))
    return changes
