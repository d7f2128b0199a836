"""What application code may read about one job: ``jobs.get(id)``.

A snapshot taken from the stored row, so reading it again later never changes it; the
row's bookkeeping (lease, fence, links) stays behind the storage contract.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from millrace_django.contract import JSON, TERMINAL_JOB_STATES, JobRecord, JobState


@dataclass(frozen=True, slots=True, kw_only=True)
class JobStatus:
    """One job as stored when it was read."""

    id: UUID
    target: str
    """The job's function, ``"package.module:function"``."""
    queue: str
    state: JobState
    attempts: int
    """Runs started so far, the current one included (a run that was interrupted, by a
    crash or a lost lease, counts too)."""
    result: JSON
    """The function's return value once the job succeeded; ``None`` before."""
    last_error: str | None
    """The traceback of the latest failed run, kept after a later success; ``None`` if no
    run failed."""
    created_at: datetime
    finished_at: datetime | None
    """When it succeeded, died or was cancelled (UTC)."""
    tags: tuple[str, ...] = ()
    """The labels it was created with (``@job(tags=...)``/``using``), sorted."""
    checkpoint: JSON = None
    """What a run saved last with ``context.checkpoint()`` (kept after success);
    ``None`` if none did."""

    @property
    def finished(self) -> bool:
        """Whether the state is final: succeeded, dead or cancelled."""
        return self.state in TERMINAL_JOB_STATES

    @classmethod
    def of(cls, record: JobRecord) -> JobStatus:
        return cls(
            id=record.id,
            target=record.invocation.target,
            queue=record.queue,
            state=record.state,
            attempts=record.attempt,
            result=record.result,
            last_error=record.last_error,
            created_at=record.created_at,
            finished_at=record.finished_at,
            tags=record.tags,
            checkpoint=record.checkpoint,
        )


def job_id_of(value: UUID | str) -> UUID:
    """``value`` as a job id: a UUID, or its string form (a failure observer receives the
    dead job's id as a string)."""
    if isinstance(value, UUID):
        return value
    if isinstance(value, str):
        try:
            return UUID(value)
        except ValueError:
            raise ValueError(f"{value!r} is not a job id (a UUID)") from None
    raise TypeError(f"a job id must be a UUID or its string; got {value!r}")
