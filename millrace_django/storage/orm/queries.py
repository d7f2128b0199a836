"""The hot queries, built without running them.

Each function returns a queryset (or the values of an ``UPDATE``) for the caller to run
inside its transaction, so the SQL a vendor gets can also be compiled and inspected
without a server (``tests/unit/test_sqlserver_sql.py`` does so for SQL Server). Every
instant comes in as a parameter, read from the storage's clock by the caller: no query
here uses the database's own time.
"""

from __future__ import annotations

import operator
from collections.abc import Collection, Sequence
from datetime import datetime
from functools import reduce
from typing import TYPE_CHECKING, Any
from uuid import UUID

from django.db.models import (
    Case,
    DateTimeField,
    Exists,
    Expression,
    IntegerField,
    JSONField,
    Model,
    OuterRef,
    Q,
    QuerySet,
    Value,
    When,
)

from millrace_django.contract import (
    ACTIVE_JOB_STATES,
    PRE_ACTIVE_JOB_STATES,
    TERMINAL_JOB_STATES,
    JobState,
    JobTransition,
    OverlapPolicy,
    TenantFilter,
    TenantScope,
)
from millrace_django.models import Bookmark, Job, PausedQueue, Recurring, job_codes
from millrace_django.models import JobStateCode as Code

if TYPE_CHECKING:
    from millrace_django.storage.orm.vendors import Vendor

_DUE = job_codes({JobState.SCHEDULED, JobState.FAILED})
_TERMINAL = job_codes(TERMINAL_JOB_STATES)
_PRE_ACTIVE = job_codes(PRE_ACTIVE_JOB_STATES)
_ACTIVE = job_codes(ACTIVE_JOB_STATES)


def tenant_q(tenant: TenantFilter) -> Q:
    """Rows of any tenant, of none, or of the one named."""
    if tenant.scope is TenantScope.UNTENANTED:
        return Q(tenant_id__isnull=True)
    if tenant.scope is TenantScope.TENANT:
        return Q(tenant_id=tenant.tenant_id)
    return Q()


def created_q(after: datetime | None, before: datetime | None) -> Q:
    """``after`` inclusive, ``before`` exclusive."""
    q = Q()
    if after is not None:
        q &= Q(created_at__gte=after)
    if before is not None:
        q &= Q(created_at__lt=before)
    return q


def not_paused(jobs: QuerySet[Job]) -> Any:
    """The job's queue has no pause row (read in the claim's own statement)."""
    paused = PausedQueue.objects.using(jobs.db).filter(queue=OuterRef("queue"))
    return ~Exists(paused)


def claim_candidates(
    jobs: QuerySet[Job], queues: Collection[str], now: datetime, limit: int
) -> QuerySet[Job]:
    """The next ``limit`` enqueued jobs without limits of ``queues``, locked, skipping
    rows another claimer holds: priority first, then insertion order, across all the
    queues (read from the unlimited lane of ``millrace_job_ready``), paused queues and
    jobs past their deadline by ``now`` left out (limited jobs: see ``limits.py``)."""
    return (
        jobs.select_for_update(skip_locked=True)
        .filter(
            not_paused(jobs),
            unexpired_q(now),
            state=Code.ENQUEUED,
            limited=False,
            queue__in=sorted(queues),
        )
        .order_by("-priority", "seq")[:limit]
    )


def unexpired_q(now: datetime) -> Q:
    """Jobs that may still start at ``now``: no deadline, or a later one."""
    return Q(expires_at__isnull=True) | Q(expires_at__gt=now)


def expiring(jobs: QuerySet[Job], now: datetime, limit: int) -> QuerySet[Job]:
    """The next ``limit`` unstarted jobs whose deadline has passed by ``now``, locked,
    skipping rows another sweeper holds, soonest deadline first (``millrace_job_expiring``)."""
    return (
        jobs.select_for_update(skip_locked=True)
        .filter(state__in=_PRE_ACTIVE, expires_at__lte=now)
        .order_by("expires_at", "seq")
        .only("seq", "uuid", "state", "queue", "target", "tenant_id", "expires_at")[:limit]
    )


def _previous_running(jobs: QuerySet[Job]) -> Exists:
    """A recurring definition's last fired job (``fired_job_id``) is still active: what
    its overlap policy looks at (one probe of the job's ``uuid`` index)."""
    return Exists(jobs.filter(uuid=OuterRef("fired_job_id"), state__in=_ACTIVE))


def may_fire(jobs: QuerySet[Job]) -> Q:
    """Recurring definitions whose overlap policy lets an occurrence fire now: ``allow``,
    or the job of their last fire no longer active."""
    return Q(overlap=OverlapPolicy.ALLOW.value) | Q(~_previous_running(jobs))


def held(jobs: QuerySet[Job]) -> Q:
    """Recurring definitions whose due occurrence overlap ``queue`` holds back."""
    return Q(overlap=OverlapPolicy.QUEUE.value) & Q(_previous_running(jobs))


def expired_candidates(
    jobs: QuerySet[Job], queues: Collection[str], now: datetime, limit: int
) -> QuerySet[Job]:
    """The next ``limit`` jobs without limits of ``queues`` still ``processing`` under a
    lease that has run out by ``now``, locked, skipping rows another claimer holds, in
    claim order (found through ``millrace_job_leased``)."""
    return (
        jobs.select_for_update(skip_locked=True)
        .filter(
            not_paused(jobs),
            state=Code.PROCESSING,
            limited=False,
            lease_until__lte=now,
            queue__in=sorted(queues),
        )
        .order_by("-priority", "seq")[:limit]
    )


def fenced(jobs: QuerySet[Job], t: JobTransition) -> QuerySet[Job]:
    """The job ``t`` moves, locked, iff it still matches the fence ``(processing,
    worker, attempt)``. A locked row is waited for, never skipped: skipping would fail
    a fence that holds."""
    return (
        jobs.select_for_update()
        .filter(
            uuid=t.job_id,
            state=Code.PROCESSING,
            worker_id=t.expected_worker_id,
            attempt=t.expected_attempt,
        )
        .only(
            "seq",
            "uuid",
            "queue",
            "target",
            "tenant_id",
            "attempt",
            "failures",
            "worker_id",
            "limited",
        )
    )


def fenced_batch(jobs: QuerySet[Job], transitions: Sequence[JobTransition]) -> QuerySet[Job]:
    """``(uuid, seq)`` of the jobs of ``transitions`` whose own fence holds, locked."""
    fence = reduce(
        operator.or_,
        (
            Q(uuid=t.job_id, worker_id=t.expected_worker_id, attempt=t.expected_attempt)
            for t in transitions
        ),
    )
    return jobs.select_for_update().filter(fence, state=Code.PROCESSING)


def completed(won: dict[int, JobTransition], now: datetime) -> dict[str, Any]:
    """The ``UPDATE`` values acknowledging plain successes, per row (keyed by ``seq``)."""
    return {
        "state": Code.SUCCEEDED,
        "worker_id": None,
        "lease_until": None,
        "key_scope": None,
        "failures": _per_row(won, lambda t: t.failures, IntegerField()),
        "finished_at": _per_row(won, lambda t: t.finished_at or now, DateTimeField()),
        "result": _per_row(won, lambda t: t.result, JSONField()),
    }


def due(jobs: QuerySet[Job], now: datetime, limit: int) -> QuerySet[Job, tuple[int, str]]:
    """``(seq, queue)`` of the next ``limit`` scheduled or failed jobs due by ``now``,
    locked, skipping rows another activator holds: oldest due first, then insertion
    order."""
    return (
        jobs.select_for_update(skip_locked=True)
        .filter(state__in=_DUE, due_at__lte=now)
        .order_by("due_at", "seq")
        .values_list("seq", "queue")[:limit]
    )


def due_heads(
    jobs: QuerySet[Job], recurring: QuerySet[Recurring], after: datetime, *, partial_indexes: bool
) -> list[QuerySet[Any, datetime | None]]:
    """Queries of at most one time each, whose least is the next due time after
    ``after``: the first ``due_at`` of the waiting jobs and the first ``next_fire_time``,
    each the head of an index range. With ``partial_indexes`` one query covers both
    waiting states, which are the due index's condition (filtering one state would walk
    past every row of the other); without, the index leads with the state, so one query
    per state (ordering an ``IN`` over both would make MariaDB sort every waiting row)."""
    by_state = [_DUE] if partial_indexes else [[state] for state in _DUE]
    heads: list[QuerySet[Any, datetime | None]] = [
        jobs.filter(state__in=states, due_at__gt=after)
        .order_by("due_at")
        .values_list("due_at", flat=True)[:1]
        for states in by_state
    ]
    heads.append(
        recurring.filter(enabled=True, next_fire_time__gt=after)
        .order_by("next_fire_time")
        .values_list("next_fire_time", flat=True)[:1]
    )
    return heads


def awaiting_children(
    jobs: QuerySet[Job], parents: Collection[UUID]
) -> QuerySet[Job, tuple[int, str]]:
    """``(seq, queue)`` of the ``awaiting`` continuations of ``parents``, locked."""
    return (
        jobs.select_for_update()
        .filter(parent_id__in=list(parents), state=Code.AWAITING)
        .values_list("seq", "queue")
    )


def oldest_bookmark(
    bookmarks: QuerySet[Bookmark], vendor: Vendor, signal_name: str, correlation_id: str
) -> QuerySet[Bookmark]:
    """The oldest bookmark waiting for the signal (``created_at``, then id in RFC 4122
    byte order), locked, skipping one a concurrent consumer holds."""
    return (
        bookmarks.select_for_update(skip_locked=True)
        .filter(signal_name=signal_name, correlation_id=correlation_id)
        .order_by("created_at", vendor.id_order("id"))[:1]
    )


def waiting_bookmarks(
    bookmarks: QuerySet[Bookmark], wanted: Sequence[tuple[str, str]]
) -> QuerySet[Bookmark]:
    """Every bookmark waiting for one of the ``(signal, correlation)`` pairs, locked,
    skipping those a concurrent consumer holds (one ``IN`` list per signal name)."""
    by_signal: dict[str, set[str]] = {}
    for name, correlation in wanted:
        by_signal.setdefault(name, set()).add(correlation)
    match = reduce(
        operator.or_,
        (
            Q(signal_name=name, correlation_id__in=sorted(correlations))
            for name, correlations in by_signal.items()
        ),
    )
    return bookmarks.select_for_update(skip_locked=True).filter(match)


def newest_first[Row: Model](
    rows: QuerySet[Row],
    vendor: Vendor,
    id_field: str,
    after: tuple[datetime, UUID] | None,
    count: int,
) -> QuerySet[Row]:
    """``count`` rows newest first (``created_at``, then ``id_field`` in RFC 4122 byte
    order, descending), starting after the keyset position ``after``."""
    tie = vendor.id_order(id_field)
    if not isinstance(tie, str):
        rows, tie = rows.alias(_id_order=tie), "_id_order"  # type: ignore[assignment]
    if after is not None:
        at, last_id = after
        before = {f"{tie}__lt": vendor.id_bound(last_id)}
        rows = rows.filter(Q(created_at__lt=at) | Q(created_at=at, **before))
    return rows.order_by("-created_at", f"-{tie}")[:count]


def descending(key: str | Expression) -> Any:
    """``key`` (a field name or an expression) in descending order."""
    return f"-{key}" if isinstance(key, str) else key.desc()


def _per_row(won: dict[int, JobTransition], value: Any, field: Any) -> Case:
    whens = [When(seq=seq, then=Value(value(t), output_field=field)) for seq, t in won.items()]
    return Case(*whens, output_field=field)
