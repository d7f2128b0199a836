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

from millrace_django.contract.records import (
    JSON,
    Invocation,
    JobLogLine,
    JobRecord,
    OverlapPolicy,
    RetrySpec,
    WorkflowInstanceRecord,
)
from millrace_django.contract.states import InstanceState, JobState

DEFAULT_PAGE_SIZE = 50
MAX_PAGE_SIZE = 200
ATTEMPT_HISTORY_CAP = 10
CONTINUATION_CAP = 20
"""Continuations listed in a job's details: the newest ones."""
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


def floor_minute(instant: datetime) -> datetime:
    """The UTC minute ``instant`` falls in (what throughput is counted per)."""
    return instant.astimezone(UTC).replace(second=0, microsecond=0)


def throughput_window(since: datetime, until: datetime) -> list[datetime]:
    """The minutes a throughput read answers for ``(since, until)``: both floored to the
    minute, at most :data:`THROUGHPUT_MINUTES_CAP` of them (the newest), oldest first."""
    end = floor_minute(until)
    start = max(floor_minute(since), end - timedelta(minutes=THROUGHPUT_MINUTES_CAP))
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
    target_prefix: str | None = None
    """The target starts with this (case-sensitive; the whole target is a prefix of
    itself); empty: none. Read through an index on every database."""
    target_contains: str | None = None
    """Case-insensitive (ASCII letters at least) substring of the target; blank: none.
    No ordinary index serves it: see docs/dashboard.md for PostgreSQL's trigram index."""
    tag: str | None = None
    """Jobs carrying this tag, read through an index of the tags alone: a page costs the
    tag's jobs, however many other jobs there are."""
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
    last_attempt_recorded: bool
    """The attempt history holds the latest attempt (number ``attempt``): it ended failed
    or interrupted. Otherwise it is running, it ended with an outcome other than a
    failure (success, a cancel, a poison-pill verdict), or there was none."""
    workflow_instance_id: UUID | None
    activity_node_id: str | None
    """The workflow step (graph node) a workflow job runs, resumes or recovers."""
    workflow_definition_id: str | None
    """The definition of the job's workflow instance (``None`` once the instance is gone)."""

    @classmethod
    def of(
        cls, job: JobRecord, *, last_attempt_recorded: bool, workflow_definition_id: str | None
    ) -> JobSummary:
        """``job`` as a list row, with what the job alone does not say: whether its
        history holds its latest attempt, and its workflow instance's definition."""
        return cls(
            id=job.id,
            queue=job.queue,
            state=job.state,
            target=job.invocation.target,
            priority=job.priority,
            created_at=job.created_at,
            due_at=job.due_at,
            finished_at=job.finished_at,
            attempt=job.attempt,
            failures=job.failures,
            tenant_id=job.tenant_id,
            worker_id=job.worker_id,
            last_attempt_recorded=last_attempt_recorded,
            workflow_instance_id=job.workflow_instance_id,
            activity_node_id=job.activity_node_id,
            workflow_definition_id=workflow_definition_id,
        )

    @property
    def interruptions(self) -> int:
        """Attempts that ended without an outcome: a lost lease, a crash, a release.

        Every attempt but the latest ended failed or interrupted (any other end is final),
        and ``failures`` counts the failed ones. The latest one is an interruption only
        when the history holds it and it did not fail: one in flight, a success, a cancel
        or a verdict is none."""
        ended_without_outcome = self.attempt - self.failures
        if not self.last_attempt_recorded:
            ended_without_outcome -= 1
        return max(0, ended_without_outcome)


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
    checkpoint: JSON = None
    """The job's own checkpoint, as its latest attempt to save one left it."""
    logs: Sequence[JobLogLine]
    """Oldest first, at most :data:`LOG_LINE_CAP` (the newest)."""
    lease_until: datetime | None
    cancel_requested: bool
    attempts: Sequence[JobAttempt]
    """Newest first, at most :data:`ATTEMPT_HISTORY_CAP`."""
    continuations: Sequence[JobSummary]
    """The jobs continuing this one (``parent_id`` is its id), newest first, at most
    :data:`CONTINUATION_CAP`."""
    expires_at: datetime | None = None
    """The job's deadline; one that ended by it is ``cancelled`` with the reason
    (:func:`~millrace_django.contract.expired_reason`) in ``last_error``."""
    hard_timeout: timedelta | None = None
    """The limit at which each attempt's child process is killed."""
    tags: tuple[str, ...] = ()
    """The job's tags, sorted."""


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
    overlap: OverlapPolicy = OverlapPolicy.ALLOW
    last_skip_time: datetime | None = None
    """The occurrence last dropped by overlap ``skip``."""
    enabled: bool = True
    """``False`` while disabled by an operator (it does not fire)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class InstanceSummary:
    """A list row: an instance without its data and cursor (left to the detail read)."""

    id: UUID
    definition_id: str
    definition_version: int
    state: InstanceState
    tenant_id: str | None
    created_at: datetime
    updated_at: datetime
    revision: int

    @classmethod
    def of(cls, instance: WorkflowInstanceRecord) -> InstanceSummary:
        """``instance`` as a list row."""
        return cls(
            id=instance.id,
            definition_id=instance.definition_id,
            definition_version=instance.definition_version,
            state=instance.state,
            tenant_id=instance.tenant_id,
            created_at=instance.created_at,
            updated_at=instance.updated_at,
            revision=instance.revision,
        )


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
