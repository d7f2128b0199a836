"""The limited lane of the claim: jobs that carry limits, started under their scopes' locks.

Ready jobs sit in two lanes of ``millrace_job_ready`` (``limited`` leads the index): the
plain claim reads only unlimited jobs, as it always did, and never a limit. A claim of
limited jobs passes over the jobs of scopes already full (read from the jobs in flight),
locks the next of the others (skipping those another claimer holds), then the
``millrace_limit`` row of every scope they carry, in scope order (so claims of a scope
serialize, and claims of unrelated scopes do not), and only then counts the scopes' jobs
``processing`` (through ``millrace_job_leased``: the jobs in flight, never history) and
reads their recent starts. A claim that waited for a scope's row therefore sees every
start committed by the claims before it, and :class:`~millrace_django.contract.Admission`
decides from there. A job leaves ``processing`` by any path without touching a limit:
the next claim simply counts one fewer.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import IntegrityError
from django.db.models import Count, QuerySet

from millrace_django.contract import (
    Admission,
    LimitUsage,
    full_scopes,
    limits_of,
    queue_scope,
    running_by_scope,
    usage_by_scope,
)
from millrace_django.models import Job
from millrace_django.models import JobStateCode as Code
from millrace_django.models import Limit as LimitRow
from millrace_django.storage.orm import queries
from millrace_django.storage.orm.context import OrmContext
from millrace_django.storage.orm.transactions import InsertConflict

LOOK_PAST = 256
"""Held-back jobs a claim reads past, in claim order, to find one whose scopes have room:
jobs further back wait until those ahead of them start (or a later claim)."""

_DECIDED_BY = ("seq", "priority", "state", "limits")
"""What the admission reads of a candidate: held-back jobs are read this far only."""
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def ready_limited(
    jobs: QuerySet[Job],
    queues: Collection[str],
    now: datetime,
    limit: int,
    full: Collection[str] = (),
) -> QuerySet[Job]:
    """The next ``limit`` enqueued limited jobs of ``queues``, locked, skipping rows
    another claimer holds, in claim order (the limited lane of ``millrace_job_ready``);
    those whose narrowest scope is among the ``full`` ones are passed over unlocked."""
    return (
        jobs.select_for_update(skip_locked=True)
        .filter(
            queries.not_paused(jobs),
            queries.unexpired_q(now),
            state=Code.ENQUEUED,
            limited=True,
            queue__in=sorted(queues),
        )
        .exclude(limit_key__in=sorted(full))
        .order_by("-priority", "seq")
        .only(*_DECIDED_BY)[:limit]
    )


def expired_limited(
    jobs: QuerySet[Job], queues: Collection[str], now: datetime, limit: int
) -> QuerySet[Job]:
    """The next ``limit`` limited jobs of ``queues`` under an expired lease, locked,
    skipping rows another claimer holds, in claim order (``millrace_job_leased``)."""
    return (
        jobs.select_for_update(skip_locked=True)
        .filter(
            queries.not_paused(jobs),
            state=Code.PROCESSING,
            limited=True,
            lease_until__lte=now,
            queue__in=sorted(queues),
        )
        .order_by("-priority", "seq")
        .only(*_DECIDED_BY)[:limit]
    )


def running_limits(jobs: QuerySet[Job]) -> QuerySet[Job, object]:
    """The limits of every limited job ``processing`` (the jobs in flight only)."""
    return jobs.filter(state=Code.PROCESSING, limited=True).values_list("limits", flat=True)


def waiting_limits(jobs: QuerySet[Job]) -> QuerySet[Any, Any]:
    """How many limited jobs wait with each distinct value of limits (one per function,
    or key, and queue): the limited lane of ``millrace_job_ready``, grouped."""
    return (
        jobs.filter(state=Code.ENQUEUED, limited=True)
        .values("limits")
        .annotate(n=Count("seq"))
        .order_by()
    )


def limit_usage(ctx: OrmContext) -> list[LimitUsage]:
    """See :meth:`~millrace_django.contract.MonitoringStorage.get_limit_usage`."""

    def read() -> list[LimitUsage]:
        running = [limits_of(stored) for stored in running_limits(ctx.jobs())]
        waiting = [(limits_of(row["limits"]), row["n"]) for row in waiting_limits(ctx.jobs())]
        return usage_by_scope(running, waiting)

    return ctx.tx.read(read)


def forget_idle_limits(ctx: OrmContext, before: datetime, limit: int) -> int:
    """See :meth:`~millrace_django.contract.JobStorage.forget_idle_limits`: the idle rows
    are locked, skipping those a claim holds, oldest first (``millrace_limit_idle``),
    then deleted; a claim that waited for one finds it gone and replays."""
    if limit <= 0:
        return 0

    def forget() -> int:
        idle = list(
            ctx.limits()
            .select_for_update(skip_locked=True)
            .filter(updated_at__lt=before)
            .order_by("updated_at")
            .values_list("scope", flat=True)[:limit]
        )
        if not idle:
            return 0
        deleted, _ = ctx.limits().filter(scope__in=idle).delete()
        return deleted

    return ctx.tx.write(forget)


def scope_rows(rows: QuerySet[LimitRow], scopes: Iterable[str]) -> QuerySet[LimitRow]:
    """The rows of ``scopes``, locked in scope order (claimers never wait in a cycle)."""
    return rows.select_for_update().filter(scope__in=sorted(scopes)).order_by("scope")


def pick_limited(ctx: OrmContext, queues: Collection[str], now: datetime, room: int) -> list[Job]:
    """Up to ``room`` limited jobs of ``queues`` that may start at ``now``, in claim
    order, locked, their starts recorded; the caller leases them in the same transaction.
    Candidates are read only as far as the admission needs; those it admits, in full."""
    scan = room + LOOK_PAST
    # Read before the scopes are locked: only to pass over the waiting jobs of scopes
    # that are full (one key's backlog must not hide another key's jobs); admission
    # reads the running jobs again once the scopes are locked.
    full = full_scopes([limits_of(stored) for stored in running_limits(ctx.jobs())])
    open_queues = [queue for queue in queues if queue_scope(queue) not in full]
    candidates = sorted(
        [
            *ready_limited(ctx.jobs(), open_queues, now, scan, full),
            *expired_limited(ctx.jobs(), queues, now, scan),
        ],
        key=lambda row: (-row.priority, row.seq),
    )
    if not candidates:
        return []
    carried = {row.seq: limits_of(row.limits) for row in candidates}
    scopes = {limit.scope for limits in carried.values() for limit in limits}
    locked = _lock_scopes(ctx, scopes, now)
    running = running_by_scope(limits_of(stored) for stored in running_limits(ctx.jobs()))
    admission = Admission(
        running,
        {scope: [_instant(us) for us in row.starts] for scope, row in locked.items()},
        now,
    )
    picked: list[int] = []
    for row in candidates:
        if len(picked) == room:
            break
        if admission.admit(carried[row.seq], holds_slot=row.state == Code.PROCESSING):
            picked.append(row.seq)
    for scope, starts in admission.recorded_starts().items():
        ctx.limits().filter(scope=scope).update(
            starts=[(at - _EPOCH) // _MICROSECOND for at in starts], updated_at=now
        )
    if not picked:
        return []
    whole = ctx.jobs().in_bulk(picked)  # locked already: read in full the jobs to start
    return [whole[seq] for seq in picked]


def _lock_scopes(ctx: OrmContext, scopes: set[str], now: datetime) -> dict[str, LimitRow]:
    """The rows of ``scopes``, created if missing, then locked."""
    rows = ctx.limits()
    missing = scopes - set(rows.filter(scope__in=sorted(scopes)).values_list("scope", flat=True))
    if missing:
        try:
            rows.bulk_create(
                [LimitRow(scope=scope, starts=[], updated_at=now) for scope in sorted(missing)]
            )
        except IntegrityError as error:  # created meanwhile: replayed, then found
            raise InsertConflict(str(error)) from error
    locked = {row.scope: row for row in scope_rows(rows, scopes)}
    if len(locked) < len(scopes):  # forgotten since it was found: start again
        raise InsertConflict(f"limit rows forgotten meanwhile: {sorted(scopes - set(locked))}")
    return locked


def _instant(microseconds: int) -> datetime:
    return _EPOCH + microseconds * _MICROSECOND
