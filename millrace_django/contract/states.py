"""Job and workflow-instance states, and which moves between them are legal.

The values are what providers store; renaming one is a schema change.
"""

from __future__ import annotations

from enum import StrEnum


class JobState(StrEnum):
    SCHEDULED = "scheduled"  # waiting for due_at; the scheduler activates it
    ENQUEUED = "enqueued"  # claimable
    PROCESSING = "processing"  # leased to a worker
    SUCCEEDED = "succeeded"
    FAILED = "failed"  # failed, awaiting a retry at due_at (not terminal)
    DEAD = "dead"  # failed for good
    CANCELLED = "cancelled"
    AWAITING = "awaiting"  # a continuation waiting for its parent to succeed


class InstanceState(StrEnum):
    RUNNING = "running"
    SUSPENDED = "suspended"
    COMPLETED = "completed"
    FAILED = "failed"
    COMPENSATED = "compensated"
    CANCELLED = "cancelled"


TERMINAL_JOB_STATES: frozenset[JobState] = frozenset(
    {JobState.SUCCEEDED, JobState.DEAD, JobState.CANCELLED}
)
"""Terminal states never change again."""

ACTIVE_JOB_STATES: frozenset[JobState] = frozenset(JobState) - TERMINAL_JOB_STATES
"""States in which a job holds its (tenant, idempotency key) scope."""

PRE_ACTIVE_JOB_STATES: frozenset[JobState] = frozenset(
    {JobState.SCHEDULED, JobState.ENQUEUED, JobState.FAILED, JobState.AWAITING}
)
"""States a cancel moves straight to ``cancelled`` (a running job only gets a flag)."""

INSERTABLE_JOB_STATES: frozenset[JobState] = frozenset(
    {JobState.SCHEDULED, JobState.ENQUEUED, JobState.AWAITING}
)
"""The only states a new job may be stored in."""

TRANSITION_TARGETS: frozenset[JobState] = frozenset(
    {JobState.SUCCEEDED, JobState.FAILED, JobState.DEAD, JobState.CANCELLED, JobState.ENQUEUED}
)
"""Targets a worker's fenced transition may name (``enqueued`` is a release)."""

TERMINAL_INSTANCE_STATES: frozenset[InstanceState] = frozenset(
    {
        InstanceState.COMPLETED,
        InstanceState.FAILED,
        InstanceState.COMPENSATED,
        InstanceState.CANCELLED,
    }
)

ALLOWED_JOB_TRANSITIONS: dict[JobState, frozenset[JobState]] = {
    JobState.SCHEDULED: frozenset({JobState.ENQUEUED, JobState.CANCELLED}),
    JobState.ENQUEUED: frozenset({JobState.PROCESSING, JobState.CANCELLED}),
    JobState.PROCESSING: TRANSITION_TARGETS | {JobState.PROCESSING},  # reclaim after expiry
    JobState.FAILED: frozenset({JobState.ENQUEUED, JobState.CANCELLED}),
    JobState.AWAITING: frozenset({JobState.ENQUEUED, JobState.CANCELLED}),
    JobState.SUCCEEDED: frozenset(),
    JobState.DEAD: frozenset(),
    JobState.CANCELLED: frozenset(),
}
"""Every legal move of a stored job; anything else is a bug in a provider or the engine."""


def can_transition(source: JobState, target: JobState) -> bool:
    """Whether a stored job may move from ``source`` to ``target``."""
    return target in ALLOWED_JOB_TRANSITIONS[source]
