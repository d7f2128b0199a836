"""A task's Millrace options as it declared them, kept with its job.

The job keeps the *resolved* retry policy (``max_attempts`` applied to the task's
``retry``, the alias's or the project's default), which cannot be read back into what
the task said: ``Retry.exponential(5)`` may be the default or the task's own choice.
``get_result`` must rebuild the very task ``enqueue()`` was given, so the options
that the job does not keep as declared (``retry`` and ``max_attempts``) travel in
the job's arguments; ``timeout`` and ``idempotency_key`` are stored as declared.
"""

from __future__ import annotations

from typing import Any

from millrace_django.contract import JSON
from millrace_django.engine.retry import retry_json, retry_of


def declared_options(task: object) -> dict[str, JSON]:
    """The options ``task`` sets that its job keeps only resolved (empty: none)."""
    stored: dict[str, JSON] = {}
    max_attempts = getattr(task, "max_attempts", None)
    if max_attempts is not None:
        stored["max_attempts"] = max_attempts
    retry = getattr(task, "retry", None)
    if retry is not None:
        stored["retry"] = retry_json(retry)
    return stored


def declared_changes(stored: dict[str, Any]) -> dict[str, Any]:
    """The task fields :func:`declared_options` stored, ``None`` for those it did not."""
    retry = stored.get("retry")
    return {
        "max_attempts": stored.get("max_attempts"),
        "retry": retry_of(retry) if retry is not None else None,
    }
