"""The task runner's record of a task's attempts, kept as the job's checkpoint.

Millrace keeps counters on the job row and a history row only for attempts that ended
badly, which is not enough for ``TaskResult.worker_ids`` (one per attempt, successes
too), ``started_at`` or ``last_attempted_at``. So the runner records each attempt as it
starts (fenced by the claim, before the task function runs) and, when the function
raises, the exception's class path. The record is the job's checkpoint: fenced, kept
through retries and success, shown on the dashboard's job page, and out of the task's
reach (``TaskContext`` does not expose it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from millrace_django.contract import JSON

KEPT_ATTEMPTS = 200
"""The newest attempts the record keeps: a bound on the checkpoint's size."""


@dataclass(frozen=True, slots=True)
class TaskAttempt:
    """One attempt, as the runner saw it start."""

    number: int
    worker_id: str
    started_at: datetime
    raised: str | None = None
    """The class path of the exception the task function raised, if it raised one."""

    def to_json(self) -> dict[str, JSON]:
        stored: dict[str, JSON] = {
            "attempt": self.number,
            "worker_id": self.worker_id,
            "started_at": self.started_at.isoformat(),
        }
        if self.raised is not None:
            stored["raised"] = self.raised
        return stored

    @classmethod
    def from_json(cls, stored: object) -> TaskAttempt | None:
        """The attempt ``to_json`` stored, or ``None`` for anything else."""
        if not isinstance(stored, Mapping):
            return None
        number, worker_id = stored.get("attempt"), stored.get("worker_id")
        started_at, raised = stored.get("started_at"), stored.get("raised")
        if not (
            type(number) is int
            and isinstance(worker_id, str)
            and isinstance(started_at, str)
            and (raised is None or isinstance(raised, str))
        ):
            return None
        try:
            started = datetime.fromisoformat(started_at)
        except ValueError:
            return None
        return cls(number, worker_id, started, raised)


@dataclass(frozen=True, slots=True)
class TaskAttempts:
    """The attempts the runner recorded, oldest first (the newest :data:`KEPT_ATTEMPTS`)."""

    attempts: tuple[TaskAttempt, ...] = ()

    @classmethod
    def from_checkpoint(cls, checkpoint: JSON) -> TaskAttempts:
        """The record a job's checkpoint holds; empty for a job that never started."""
        stored: Any = checkpoint.get("attempts") if isinstance(checkpoint, dict) else None
        if not isinstance(stored, list):
            return cls()
        read = (TaskAttempt.from_json(entry) for entry in stored)
        return cls(tuple(attempt for attempt in read if attempt is not None))

    def to_checkpoint(self) -> JSON:
        return {"attempts": [attempt.to_json() for attempt in self.attempts]}

    def started(self, attempt: TaskAttempt) -> TaskAttempts:
        """This record with ``attempt`` added as the newest."""
        return TaskAttempts((*self.attempts, attempt)[-KEPT_ATTEMPTS:])

    def raised(self, number: int, class_path: str) -> TaskAttempts:
        """This record with attempt ``number`` marked as raising ``class_path``."""
        return TaskAttempts(
            tuple(
                replace(attempt, raised=class_path) if attempt.number == number else attempt
                for attempt in self.attempts
            )
        )

    @property
    def raised_by_number(self) -> dict[int, str]:
        """The class each attempt's function raised, by attempt number."""
        return {a.number: a.raised for a in self.attempts if a.raised is not None}
