"""Maintained counts of finished jobs and workflow instances: the ``millrace_tally``
rows (per state, queue, target and tenant) and the ``millrace_finished_minute`` rows
(jobs that ended succeeded or dead, per UTC minute: the throughput chart).

Finished rows pile up for the whole retention period, so no read counts them: every
transaction that ends jobs (or instances) appends one row per group it ended, every
purge one negative row per group it deleted, and a group's count is the sum of its
rows. :func:`fold` (the scheduler's, each pass) replaces a group's rows by one holding
their sum, so a read sums about one row per group plus what ended since the last pass.
Rows are only inserted and deleted, never updated: writers of the same group never wait
for one another.
"""

from __future__ import annotations

import operator
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from functools import reduce
from typing import Any

from django.db.models import Count, Q, QuerySet, Sum

from millrace_django.contract import (
    TERMINAL_INSTANCE_STATES,
    TenantFilter,
    floor_minute,
    run_time_bucket,
)
from millrace_django.models import (
    INSTANCE_STATE_CODES,
    FinishedMinute,
    RunMinute,
    Tally,
    TallySubject,
)
from millrace_django.models import JobStateCode as Code
from millrace_django.storage.orm.context import OrmContext
from millrace_django.storage.orm.queries import tenant_q

_PER_MINUTE = frozenset({Code.SUCCEEDED, Code.DEAD})
TERMINAL_INSTANCE_CODES = frozenset(INSTANCE_STATE_CODES[s] for s in TERMINAL_INSTANCE_STATES)


@dataclass(frozen=True, slots=True)
class MinuteKey:
    """Jobs that ended in ``state`` (succeeded or dead) within one UTC minute."""

    minute: datetime
    state: int


@dataclass(frozen=True, slots=True)
class TallyKey:
    """One group: jobs of a queue and target in a state, or instances of a definition."""

    subject: int
    state: int
    queue: str
    target: str
    tenant_id: str | None


def jobs_ended(rows: Iterable[tuple[Any, ...]]) -> Counter[TallyKey | MinuteKey]:
    """Changes for jobs that reached a terminal state: ``(state, queue, target, tenant,
    finished_at)`` per job."""
    changes: Counter[TallyKey | MinuteKey] = Counter()
    for state, queue, target, tenant, finished_at in rows:
        changes[TallyKey(TallySubject.JOB, state, queue, target, tenant)] += 1
        if state in _PER_MINUTE:
            changes[MinuteKey(floor_minute(finished_at), state)] += 1
    return changes


@dataclass(frozen=True, slots=True)
class RunKey:
    """Successes of a function (and tenant) that ended within one UTC minute after a run
    time in ``bucket`` (the job catalog's figures)."""

    minute: datetime
    target: str
    tenant_id: str | None
    bucket: int


def runs_ended(
    rows: Iterable[tuple[str, str | None, datetime | None, datetime]],
) -> Counter[RunKey]:
    """Changes for successes: ``(target, tenant, started_at, finished_at)`` per job (one
    never claimed, without a start, has no run time)."""
    changes: Counter[RunKey] = Counter()
    for target, tenant, started_at, finished_at in rows:
        if started_at is not None:
            bucket = run_time_bucket(max(finished_at - started_at, timedelta(0)))
            changes[RunKey(floor_minute(finished_at), target, tenant, bucket)] += 1
    return changes


def instance_ended(state: int, definition_id: str, tenant_id: str | None) -> Counter[TallyKey]:
    """The change for an instance that reached the terminal ``state``."""
    return Counter({TallyKey(TallySubject.INSTANCE, state, "", definition_id, tenant_id): 1})


def record(alias: str, changes: Mapping[Any, int]) -> None:
    """Append one row per group whose count changed (the transaction's own)."""
    tallies = [
        Tally(
            subject=key.subject,
            state=key.state,
            queue=key.queue,
            target=key.target,
            tenant_id=key.tenant_id,
            n=n,
        )
        for key, n in changes.items()
        if n and isinstance(key, TallyKey)
    ]
    minutes = [
        FinishedMinute(minute=key.minute, state=key.state, n=n)
        for key, n in changes.items()
        if n and isinstance(key, MinuteKey)
    ]
    runs = [
        RunMinute(
            minute=key.minute, target=key.target, tenant_id=key.tenant_id, bucket=key.bucket, n=n
        )
        for key, n in changes.items()
        if n and isinstance(key, RunKey)
    ]
    if tallies:
        Tally.objects.using(alias).bulk_create(tallies)
    if minutes:
        FinishedMinute.objects.using(alias).bulk_create(minutes)
    if runs:
        RunMinute.objects.using(alias).bulk_create(runs)


def totals(ctx: OrmContext, tenant: TenantFilter) -> dict[tuple[int, int], int]:
    """``(subject, state) -> count`` of the finished rows of ``tenant``'s groups."""
    summed = (
        ctx.tallies()
        .filter(tenant_q(tenant))
        .values_list("subject", "state")
        .annotate(n=Sum("n"))
        .order_by()
    )
    return {(subject, state): int(n) for subject, state, n in summed}


def per_minute(ctx: OrmContext, start: datetime, end: datetime) -> list[tuple[datetime, int, int]]:
    """``(minute, state, count)`` of the jobs that ended succeeded or dead in
    ``[start, end)``: about one row per minute and state."""
    summed = (
        ctx.finished_minutes()
        .filter(minute__gte=start, minute__lt=end)
        .values_list("minute", "state")
        .annotate(n=Sum("n"))
        .order_by()
    )
    return [(minute, state, int(n)) for minute, state, n in summed]


def fold(ctx: OrmContext, limit: int) -> int:
    """Replace the rows of up to ``limit`` groups of each table that have several by one
    row of their sum (none when it is zero); returns how many rows went.
    Groups are chosen by a grouped read, so a group of one row, however old, never
    holds the others back. The chosen groups' rows are locked before they are summed, so
    two folders never both replace the same rows: the second sums what is left."""

    def work() -> int:
        tallied = _fold(ctx, ctx.tallies(), _TALLY_FIELDS, TallyKey, limit)
        tallied += _fold(ctx, ctx.finished_minutes(), _MINUTE_FIELDS, MinuteKey, limit)
        runs = RunMinute.objects.using(ctx.alias)
        kept_from = floor_minute(ctx.clock.now() - RUN_MINUTES_KEPT)
        dropped, _ = runs.filter(minute__lt=kept_from).delete()
        return tallied + dropped + _fold(ctx, runs, _RUN_FIELDS, RunKey, limit)

    return ctx.tx.write(work)


_TALLY_FIELDS = ("subject", "state", "queue", "target", "tenant_id")
_MINUTE_FIELDS = ("minute", "state")
_RUN_FIELDS = ("minute", "target", "tenant_id", "bucket")
RUN_MINUTES_KEPT = timedelta(days=1)
"""Run-time rows older than this are dropped by :func:`fold` (the catalog reads the
last hour)."""


def run_times(ctx: OrmContext, since: datetime, narrowed: Q) -> list[tuple[str, int, int]]:
    """``(target, bucket, count)`` of the successes that ended from minute ``since`` on,
    of the groups ``narrowed`` selects: about one row per minute, function and bucket."""
    summed = (
        RunMinute.objects.using(ctx.alias)
        .filter(narrowed, minute__gte=since)
        .values_list("target", "bucket")
        .annotate(n=Sum("n"))
        .order_by()
    )
    return [(target, bucket, int(n)) for target, bucket, n in summed]


def _fold(
    ctx: OrmContext, rows: QuerySet[Any], fields: tuple[str, ...], key: type[Any], limit: int
) -> int:
    """Fold up to ``limit`` groups of ``rows`` (grouped by ``fields``, which build
    ``key``) that need it; how many rows went."""
    due = rows.values_list(*fields).annotate(rows=Count("id")).filter(rows__gt=1).order_by()[:limit]
    wanted = [Q(**dict(zip(fields, group, strict=True))) for *group, _ in due]
    if not wanted:
        return 0
    locked = rows.select_for_update().filter(reduce(operator.or_, wanted)).order_by("id")
    groups: defaultdict[Any, list[tuple[int, int]]] = defaultdict(list)
    for row_id, *values, n in locked.values_list("id", *fields, "n"):
        groups[key(*values)].append((row_id, n))
    gone = [row_id for members in groups.values() for row_id, _ in members]
    rows.filter(id__in=gone).delete()
    record(ctx.alias, Counter({group: sum(n for _, n in m) for group, m in groups.items()}))
    return len(gone)
