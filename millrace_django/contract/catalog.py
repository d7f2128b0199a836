"""The job catalog: figures per job function, for the dashboard's catalog pages.

Every figure comes from what a provider keeps anyway, never from counting finished jobs:
unfinished jobs are counted where they are (few, through the indexes that hold them),
finished ones from the maintained counts, and the last error is read from the newest
failed or dead job of the function alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

from millrace_django.contract.states import JobState


@dataclass(frozen=True, slots=True, kw_only=True)
class CatalogEntry:
    """One job function (its dotted target) and its figures."""

    target: str
    jobs_by_state: Mapping[JobState, int]
    """Every state, zeros included: unfinished jobs as they are now, finished ones as
    long as they are kept (the retention period)."""
    last_error: str | None = None
    """The error of the newest (by creation) of the function's jobs that are ``dead`` or
    ``failed`` (awaiting a retry); ``None`` if there is none."""
    last_error_job: UUID | None = None
    last_error_at: datetime | None = None
    """When that job was created."""

    @property
    def failure_rate(self) -> float | None:
        """The share of the function's kept finished runs that ended ``dead`` (of those
        ``succeeded`` or ``dead``); ``None`` before any ended."""
        dead = self.jobs_by_state.get(JobState.DEAD, 0)
        ended = dead + self.jobs_by_state.get(JobState.SUCCEEDED, 0)
        return dead / ended if ended else None

    @property
    def total(self) -> int:
        """Jobs of the function stored now."""
        return sum(self.jobs_by_state.values())
