"""Duplicate policies: what inserting a job does when an active job holds its key.

Every provider decides the same way from these two functions, so the rule lives once:
:func:`refusal` says whether the holder refuses the new job, :func:`replaced` what a
replaced holder becomes.
"""

from __future__ import annotations

from dataclasses import replace
from uuid import UUID

from millrace_django.contract.records import DuplicatePolicy, JobRecord
from millrace_django.contract.states import JobState
from millrace_django.errors import IdempotencyKeyHeld

REPLACEABLE_JOB_STATES = frozenset({JobState.SCHEDULED, JobState.ENQUEUED, JobState.FAILED})
"""A holder in one of these has not started (or waits to start again): ``replace``
rewrites it. One ``processing`` or ``awaiting`` a parent is left alone."""

REPLACED_FIELDS = ("invocation", "limits", "state", "due_at", "expires_at")
"""What a replaced holder takes from the new job; it keeps the rest (its id, queue,
options, counters, error, progress and checkpoint)."""


def refusal(job: JobRecord, holder_id: UUID, holder_state: JobState) -> IdempotencyKeyHeld | None:
    """The error inserting ``job`` raises because an active job holds its key, or
    ``None`` if the policy lets the insert go on (``return``, or ``replace`` of a holder
    that has not started)."""
    policy = job.on_duplicate
    if policy is DuplicatePolicy.RETURN:
        return None
    if policy is DuplicatePolicy.REPLACE and holder_state in REPLACEABLE_JOB_STATES:
        return None
    why = (
        "on_duplicate='reject'"
        if policy is DuplicatePolicy.REJECT
        else f"it is {holder_state.value}, too late to replace"
    )
    assert job.idempotency_key is not None  # (only a keyed job has a holder)
    return IdempotencyKeyHeld(job.idempotency_key, job.tenant_id, holder_id, why)


def replaced(holder: JobRecord, job: JobRecord) -> JobRecord:
    """``holder`` as ``job`` with policy ``replace`` leaves it."""
    return replace(holder, **{name: getattr(job, name) for name in REPLACED_FIELDS})
