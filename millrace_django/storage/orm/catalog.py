"""The job catalog over the ORM: figures per job function that never count finished jobs.

Unfinished jobs are counted per state and target, one state at a time through that
state's partial index (they are few); finished ones are summed from the maintained
tallies (:mod:`.tallies`); the last error is the newest ``failed`` job of the function
(an unfinished state) or its newest ``dead`` job in each queue the tallies show it
died in, each the head of a range of ``millrace_job_finished_group``: one row per group.
A function's tags, and a tag's functions, come from ``millrace_tag_target``.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from django.db.models import Count, Q, QuerySet, Sum

from millrace_django.contract import (
    ACTIVE_JOB_STATES,
    RUN_TIME_WINDOW,
    CatalogEntry,
    JobState,
    TenantFilter,
    floor_minute,
)
from millrace_django.models import JOB_STATES, Job, Tally, TallySubject, job_codes
from millrace_django.models import JobStateCode as Code
from millrace_django.storage.orm import tags, tallies
from millrace_django.storage.orm.context import OrmContext
from millrace_django.storage.orm.queries import descending, tenant_q

if TYPE_CHECKING:
    from millrace_django.storage.orm.vendors import Vendor

_ACTIVE = job_codes(ACTIVE_JOB_STATES)
_ERROR_FIELDS = ("created_at", "uuid", "last_error")


def catalog(
    ctx: OrmContext, tenant: TenantFilter, target: str | None, tag: str | None
) -> list[CatalogEntry]:
    """The entries of ``tenant``'s functions (``target``'s alone when given; with
    ``tag``, those of the functions it was seen on)."""
    tagged = tags.targets(ctx)
    narrowed = tenant_q(tenant) & (Q() if target is None else Q(target=target))
    if tag is not None:
        named = [name for name, seen in tagged.items() if tag in seen]
        if not named:
            return []
        narrowed &= Q(target__in=named)
    counts: dict[str, Counter[JobState]] = {}
    for name, code, n in [
        *finished_counts(ctx.tallies(), narrowed),
        *unfinished_counts(ctx.jobs(), narrowed),
    ]:
        if n:
            counts.setdefault(name, Counter())[JOB_STATES[code]] += int(n)
    since = floor_minute(ctx.clock.now() - RUN_TIME_WINDOW)
    runs: dict[str, dict[int, int]] = {}
    for name, bucket, n in tallies.run_times(ctx, since, narrowed):
        runs.setdefault(name, {})[bucket] = n
    dead_queues: dict[str, list[str]] = {}
    for name, queue, n in dead_groups(ctx.tallies(), narrowed):
        if n:
            dead_queues.setdefault(name, []).append(queue)
    entries = []
    for name, by_state in sorted(counts.items()):
        error = _newest_error(ctx, narrowed, name, dead_queues.get(name, []))
        entries.append(
            CatalogEntry(
                target=name,
                jobs_by_state={state: by_state[state] for state in JobState},
                last_error=None if error is None else error[2],
                last_error_job=None if error is None else error[1],
                last_error_at=None if error is None else error[0],
                run_times=runs.get(name, {}),
                tags=tagged.get(name, ()),
            )
        )
    return entries


def finished_counts(tallies: QuerySet[Tally], narrowed: Q) -> QuerySet[Tally, tuple[Any, ...]]:
    """``(target, state, count)`` of the finished jobs, summed from the tallies."""
    return (
        tallies.filter(narrowed, subject=TallySubject.JOB)
        .values_list("target", "state")
        .annotate(n=Sum("n"))
        .order_by()
    )


def unfinished_counts(jobs: QuerySet[Job], narrowed: Q) -> QuerySet[Job, tuple[Any, ...]]:
    """``(target, state, count)`` of the unfinished jobs, one state at a time, each
    through its partial index (an ``IN`` over the states would let the planner scan the
    table)."""
    rows = jobs.filter(narrowed)
    parts = [
        rows.filter(state=code).values_list("target", "state").annotate(n=Count("*")).order_by()
        for code in _ACTIVE
    ]
    return parts[0].union(*parts[1:], all=True)


def dead_groups(tallies: QuerySet[Tally], narrowed: Q) -> QuerySet[Tally, tuple[Any, ...]]:
    """``(target, queue, count)``: the queues each function has ``dead`` jobs in."""
    return (
        tallies.filter(narrowed, subject=TallySubject.JOB, state=Code.DEAD)
        .values_list("target", "queue")
        .annotate(n=Sum("n"))
        .order_by()
    )


def newest(rows: QuerySet[Job], vendor: Vendor) -> QuerySet[Job, tuple[Any, ...]]:
    """The newest row of ``rows`` in job-list order (``created_at``, then id, both
    descending), read as the head of the index that orders them."""
    order = ("-created_at", descending(vendor.id_order("uuid")))
    return rows.order_by(*order).values_list(*_ERROR_FIELDS)[:1]


def _newest_error(
    ctx: OrmContext, narrowed: Q, target: str, dead_queues: list[str]
) -> tuple[Any, ...] | None:
    """``(created_at, uuid, last_error)`` of the newest failed or dead job of ``target``."""
    rows = ctx.jobs().filter(narrowed, target=target)
    heads = [rows.filter(state=Code.FAILED)]
    heads += [rows.filter(state=Code.DEAD, queue=queue) for queue in dead_queues]
    found = [head for rows in heads for head in newest(rows, ctx.vendor)]
    return max(found, key=lambda head: (head[0], head[1].bytes), default=None)
