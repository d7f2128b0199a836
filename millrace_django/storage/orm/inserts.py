"""Enqueue semantics, shared by ``enqueue``, transitions, recurring fires and workflows.

Inside the caller's transaction: duplicate ids are refused, a job whose idempotency
scope is held by an active job is not inserted (its position answers the holder's id),
and an ``awaiting`` continuation is fixed up against its parent, whose row is locked so
the fix-up serializes with the parent's own terminal transition. What a concurrent
writer inserts after our look-ups surfaces as a unique violation, which replays the
whole transaction (:class:`~millrace_django.storage.orm.transactions.InsertConflict`).
The queues of jobs stored ``enqueued`` are noted for the wake-up hint.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from functools import reduce
from uuid import UUID

from django.db import IntegrityError
from django.db.models import Q

from millrace_django.contract import (
    ACTIVE_JOB_STATES,
    INSERTABLE_JOB_STATES,
    TERMINAL_JOB_STATES,
    DuplicatePolicy,
    JobRecord,
    JobState,
)
from millrace_django.contract.duplicates import refusal, replaced
from millrace_django.errors import DuplicateJobId, ParentJobNotFound, StorageError
from millrace_django.models import JOB_STATE_CODES, JOB_STATES, Job, job_codes
from millrace_django.storage.orm import tags, tallies
from millrace_django.storage.orm.context import OrmContext
from millrace_django.storage.orm.rows import (
    active_scope,
    job_record,
    job_row,
    job_values,
    key_digest,
)
from millrace_django.storage.orm.transactions import InsertConflict

_ACTIVE_CODES = job_codes(ACTIVE_JOB_STATES)
_TERMINAL_CODES = frozenset(job_codes(TERMINAL_JOB_STATES))
_ENQUEUED = JOB_STATE_CODES[JobState.ENQUEUED]
_FAILED_PARENT = frozenset({JobState.DEAD, JobState.CANCELLED})
_REPLACED_COLUMNS = (
    "target", "arguments", "limited", "limits", "limit_key", "state", "due_at", "expires_at",
)  # fmt: skip
"""The columns of :data:`~millrace_django.contract.duplicates.REPLACED_FIELDS`."""


def insert_jobs(ctx: OrmContext, jobs: Sequence[JobRecord]) -> list[UUID]:
    """Insert ``jobs`` with enqueue semantics and return the effective ids positionally.
    A hot path may take a batch without continuations or tags (the others need the
    stored rows' keys)."""
    if not jobs:
        return []
    _refuse_malformed(jobs)
    if not any(job.state is JobState.AWAITING or job.tags for job in jobs):
        ids = ctx.hot_path.insert(ctx, jobs)
        if ids is not None:
            return ids
    holders = _look_up_ids_and_holders(ctx, jobs)
    parents = _lock_parents(ctx, jobs)
    now = ctx.clock.now()
    effective: list[UUID] = []
    inserted: list[tuple[Job, JobRecord]] = []
    for job in jobs:
        if job.state is JobState.AWAITING:
            job = _fixed_up(job, parents, now)
        scope = active_scope(job)
        if scope is not None and scope in holders:
            if job.on_duplicate is not DuplicatePolicy.RETURN:
                _meet_holder(ctx, job, holders[scope])
            effective.append(holders[scope])
            continue
        if scope is not None:
            holders[scope] = job.id
        parents[job.id] = job.state
        inserted.append((job_row(job, track_scope=ctx.track_scope), job))
        effective.append(job.id)
    try:
        ctx.jobs().bulk_create([row for row, _ in inserted])
    except IntegrityError as error:
        raise InsertConflict(str(error)) from error
    tags.store(ctx, inserted)
    ctx.tx.enqueued(row.queue for row, _ in inserted if row.state == _ENQUEUED)
    ended = [row for row, _ in inserted if row.state in _TERMINAL_CODES]
    if ended:
        ctx.tx.tally(
            tallies.jobs_ended(
                (r.state, r.queue, r.target, r.tenant_id, r.finished_at) for r in ended
            )
        )
    return effective


def meets_holders(jobs: Sequence[JobRecord]) -> bool:
    """Whether a job of ``jobs`` has a duplicate policy other than ``return``: a hot
    path leaves such a batch to :func:`insert_jobs` (which meets each holder's locked
    row), so the default policy costs nothing more."""
    return any(job.on_duplicate is not DuplicatePolicy.RETURN for job in jobs)


def _meet_holder(ctx: OrmContext, job: JobRecord, holder_id: UUID) -> None:
    """Apply ``job``'s duplicate policy to the active holder of its key, whose row is
    locked and read again: a holder claimed or ended since the look-up is seen as it
    is now (one that released the key replays the call, which then inserts ``job``)."""
    row = ctx.jobs().select_for_update().filter(uuid=holder_id).first()
    if row is None or row.state in _TERMINAL_CODES:
        raise InsertConflict(f"the holder {holder_id} of {job.idempotency_key!r} has ended")
    holder = job_record(row)
    refused = refusal(job, holder.id, holder.state)
    if refused is not None:
        raise refused
    values = job_values(replaced(holder, job), track_scope=ctx.track_scope)
    ctx.jobs().filter(seq=row.seq).update(**{name: values[name] for name in _REPLACED_COLUMNS})
    if job.state is JobState.ENQUEUED:
        ctx.tx.enqueued([holder.queue])


def _refuse_malformed(jobs: Sequence[JobRecord]) -> None:
    seen: set[UUID] = set()
    for job in jobs:
        if job.state not in INSERTABLE_JOB_STATES:
            raise StorageError(f"a new job cannot be stored as {job.state.value!r}")
        if job.id in seen:
            raise DuplicateJobId(job.id)
        seen.add(job.id)


def _look_up_ids_and_holders(ctx: OrmContext, jobs: Sequence[JobRecord]) -> dict[str, UUID]:
    """One query: refuse ids already stored, and map each scope the batch asks for to
    the active job holding it."""
    ids = [job.id for job in jobs]
    keyed = {(job.tenant_id, job.idempotency_key) for job in jobs if job.idempotency_key}
    wanted = Q(uuid__in=ids)
    if keyed and ctx.track_scope:
        wanted |= Q(key_scope__in=[key_digest(tenant, key) for tenant, key in keyed])
    elif keyed:
        wanted |= Q(state__in=_ACTIVE_CODES) & reduce(
            operator.or_,
            (
                Q(idempotency_key=key, tenant_id=tenant)
                if tenant is not None
                else Q(idempotency_key=key, tenant_id__isnull=True)
                for tenant, key in keyed
            ),
        )
    found = ctx.jobs().filter(wanted).values_list("uuid", "state", "tenant_id", "idempotency_key")
    holders: dict[str, UUID] = {}
    stored = set()
    for uuid, state, tenant_id, key in found:
        stored.add(uuid)
        if key is not None and JOB_STATES[state] in ACTIVE_JOB_STATES:
            holders[key_digest(tenant_id, key)] = uuid
    for job_id in ids:
        if job_id in stored:
            raise DuplicateJobId(job_id)
    return holders


def _lock_parents(ctx: OrmContext, jobs: Sequence[JobRecord]) -> dict[UUID, JobState]:
    """States of the stored parents of the batch's continuations, rows locked."""
    wanted = {
        job.parent_id
        for job in jobs
        if job.state is JobState.AWAITING and job.parent_id is not None
    }
    if not wanted:
        return {}
    rows = (
        ctx.jobs()
        .select_for_update()
        .filter(uuid__in=wanted)
        .order_by("uuid")
        .values_list("uuid", "state")
    )
    return {uuid: JOB_STATES[state] for uuid, state in rows}


def _fixed_up(job: JobRecord, parents: dict[UUID, JobState], now: datetime) -> JobRecord:
    """A continuation as it must be stored given its parent's state (the parent may
    be an earlier job of the same batch)."""
    parent = parents.get(job.parent_id) if job.parent_id is not None else None
    if parent is None:
        raise ParentJobNotFound(job.parent_id or UUID(int=0))
    if parent is JobState.SUCCEEDED:
        return replace(job, state=JobState.ENQUEUED)
    if parent in _FAILED_PARENT:
        return replace(job, state=JobState.CANCELLED, finished_at=now)
    return job
