"""The dashboard's read model: queries, pages, summaries and statistics.

Reads may be stale snapshots and must never hold locks that delay claims or transitions.
Pages are keyset-paged with opaque cursors and never carry totals.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import TypeVar
from uuid import UUID

from millrace_django.contract.records import JSON, Invocation, JobLogLine, RetrySpec
from millrace_django.contract.states import InstanceState, JobState

DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 200
ATTEMPT_HISTORY_CAP = 10
LOG_LINE_CAP = 200
"""Log lines kept per job: the newest ones."""
THROUGHPUT_MINUTES_CAP = 1440
"""The widest throughput window, in minutes (a day); a wider one is cut at its start."""


def clamp_limit(limit: int) -> int:
    """Page sizes are clamped, never rejected: ``<= 0`` means the default, above the max
    means the max."""
    if limit <= 0:
        return DEFAULT_PAGE_SIZE
    return min(limit, MAX_PAGE_SIZE)


def _floor_minute(instant: datetime) -> datetime:
    return instant.astimezone(UTC).replace(second=0, microsecond=0)


def throughput_window(since: datetime, until: datetime) -> list[datetime]:
    """The minutes a throughput read answers for ``(since, until)``: both floored to the
    minute, at most :data:`THROUGHPUT_MINUTES_CAP` of them (the newest), oldest first."""
    end = _floor_minute(until)
    start = max(_floor_minute(since), end - timedelta(minutes=THROUGHPUT_MINUTES_CAP))
    minutes = []
    while start < end:
        minutes.append(start)
        start += timedelta(minutes=1)
    return minutes


class TenantScope(StrEnum):
    ANY = "any"
    UNTENANTED = "untenanted"
    TENANT = "tenant"


@dataclass(frozen=True, slots=True)
class TenantFilter:
    """Any tenant, only untenanted rows, or one named tenant."""

    scope: TenantScope = TenantScope.ANY
    tenant_id: str | None = None

    def __post_init__(self) -> None:
        named = self.scope is TenantScope.TENANT
        if named and not (self.tenant_id and self.tenant_id.strip()):
            raise ValueError("TenantFilter.of() needs a non-blank tenant id")
        if not named and self.tenant_id is not None:
            raise ValueError("only a TENANT-scoped filter names a tenant id")

    @classmethod
    def any(cls) -> TenantFilter:
        return cls(TenantScope.ANY)

    @classmethod
    def untenanted(cls) -> TenantFilter:
        return cls(TenantScope.UNTENANTED)

    @classmethod
    def of(cls, tenant_id: str) -> TenantFilter:
        return cls(TenantScope.TENANT, tenant_id)

    def matches(self, tenant_id: str | None) -> bool:
        if self.scope is TenantScope.ANY:
            return True
        if self.scope is TenantScope.UNTENANTED:
            return tenant_id is None
        return tenant_id == self.tenant_id


T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Page[T]:
    """One page; a non-null ``next_cursor`` does not promise a non-empty next page."""

    items: Sequence[T]
    next_cursor: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class JobQuery:
    """Filters AND-combine; ``created_after`` is inclusive, ``created_before`` exclusive."""

    states: frozenset[JobState] = frozenset()
    queue: str | None = None
    tenant: TenantFilter = field(default_factory=TenantFilter.any)
    created_after: datetime | None = None
    created_before: datetime | None = None
    target_contains: str | None = None
    """Case-insensitive (ASCII letters at least) substring of the target; blank: none."""
    cursor: str | None = None
    limit: int = DEFAULT_PAGE_SIZE


@dataclass(frozen=True, slots=True, kw_only=True)
class InstanceQuery:
    """``definition_version`` is ignored unless ``definition_id`` is set."""

    states: frozenset[InstanceState] = frozenset()
    definition_id: str | None = None
    definition_version: int | None = None
    tenant: TenantFilter = field(default_factory=TenantFilter.any)
    created_after: datetime | None = None
    created_before: datetime | None = None
    cursor: str | None = None
    limit: int = DEFAULT_PAGE_SIZE


@dataclass(frozen=True, slots=True, kw_only=True)
class RecurringQuery:
    queue: str | None = None
    tenant: TenantFilter = field(default_factory=TenantFilter.any)
    cursor: str | None = None
    limit: int = DEFAULT_PAGE_SIZE


@dataclass(frozen=True, slots=True, kw_only=True)
class JobSummary:
    """A list row; arguments are left to the detail read (they may hold personal data)."""

    id: UUID
    queue: str
    state: JobState
    target: str
    priority: int
    created_at: datetime
    due_at: datetime | None
    finished_at: datetime | None
    attempt: int
    failures: int
    tenant_id: str | None
    worker_id: str | None

    @property
    def interruptions(self) -> int:
        """Claims that ended without a recorded failure (the one in flight included)."""
        return self.attempt - self.failures


class AttemptOutcome(StrEnum):
    FAILED = "failed"
    INTERRUPTED = "interrupted"


@dataclass(frozen=True, slots=True, kw_only=True)
class JobAttempt:
    """One execution that ended badly; successes and cancels leave no history row."""

    attempt: int
    outcome: AttemptOutcome
    recorded_at: datetime
    worker_id: str | None
    error: str | None


@dataclass(frozen=True, slots=True, kw_only=True)
class JobDetails:
    summary: JobSummary
    invocation: Invocation
    retry: RetrySpec
    timeout: timedelta | None
    idempotency_key: str | None
    parent_id: UUID | None
    requeued_from: UUID | None
    recurring_id: str | None
    last_error: str | None
    result: JSON
    progress: JSON
    logs: Sequence[JobLogLine]
    """Oldest first, at most :data:`LOG_LINE_CAP` (the newest)."""
    lease_until: datetime | None
    cancel_requested: bool
    workflow_instance_id: UUID | None
    activity_node_id: str | None
    attempts: Sequence[JobAttempt]
    """Newest first, at most :data:`ATTEMPT_HISTORY_CAP`."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RecurringSummary:
    id: str
    cron: str
    timezone: str
    queue: str
    target: str
    priority: int
    tenant_id: str | None
    next_fire_time: datetime
    last_fire_time: datetime | None
    last_outcome: JobState | None
    """State of the most recently created job fired from this definition."""
    last_job_id: UUID | None
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class InstanceSummary:
    id: UUID
    definition_id: str
    definition_version: int
    state: InstanceState
    tenant_id: str | None
    created_at: datetime
    updated_at: datetime
    revision: int


@dataclass(frozen=True, slots=True, kw_only=True)
class JobStatistics:
    """Every state has a key (zeros included); parts may be computed independently."""

    jobs_by_state: Mapping[JobState, int]
    enqueued_by_queue: Mapping[str, int]
    instances_by_state: Mapping[InstanceState, int]
    recurring_definitions: int
    overdue_recurring_definitions: int
    oldest_enqueued_by_queue: Mapping[str, datetime] = field(default_factory=dict)
    """Per queue with enqueued jobs: the creation time of the oldest of them (a job that
    was scheduled or retried became ready later than it was created)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ThroughputPoint:
    """Jobs that reached a terminal state within one UTC minute."""

    minute: datetime
    """The minute's start (aware UTC, seconds zero)."""
    succeeded: int
    failed: int
    """Jobs that ended ``dead`` (out of retries). Cancelled jobs are not counted."""
