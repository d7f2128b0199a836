"""The dashboard's read model over the ORM: keyset pages, details and statistics.

Plain reads that take no locks; pages fetch ``limit + 1`` rows to know whether another
page exists, and never count. No read pays for history: unfinished jobs and instances
are counted through the partial indexes that hold them alone, finished ones from the
maintained tallies (:mod:`.tallies`), and a list reads each state newest first through
an index, the finished states through one per narrow filter (queue, target, tenant).
"""

from __future__ import annotations

import heapq
import sys
from collections.abc import Callable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any
from uuid import UUID

from django.db import connections
from django.db.models import Count, Exists, Min, Model, OuterRef, Q, QuerySet, Subquery
from django.db.models.functions import Lower

from millrace_django.contract import (
    ACTIVE_JOB_STATES,
    ATTEMPT_HISTORY_CAP,
    CONTINUATION_CAP,
    LOG_LINE_CAP,
    TERMINAL_INSTANCE_STATES,
    TERMINAL_JOB_STATES,
    InstanceQuery,
    InstanceState,
    InstanceSummary,
    JobAttempt,
    JobDetails,
    JobLogLine,
    JobQuery,
    JobState,
    JobStatistics,
    JobSummary,
    OverlapPolicy,
    Page,
    RecurringQuery,
    RecurringSummary,
    TenantFilter,
    ThroughputPoint,
    clamp_limit,
    decode_time_id,
    decode_time_text,
    encode_time_id,
    encode_time_text,
    floor_minute,
    throughput_window,
)
from millrace_django.models import (
    ATTEMPT_OUTCOMES,
    INSTANCE_STATE_CODES,
    INSTANCE_STATES,
    JOB_STATE_CODES,
    JOB_STATES,
    Job,
    Recurring,
    TallySubject,
    WorkflowInstance,
    job_codes,
)
from millrace_django.models import JobStateCode as Code
from millrace_django.storage.orm import tags, tallies
from millrace_django.storage.orm.context import OrmContext
from millrace_django.storage.orm.queries import (
    created_q,
    descending,
    held,
    newest_first,
    tenant_q,
)
from millrace_django.storage.orm.rows import invocation_of, row_retry

if TYPE_CHECKING:
    from millrace_django.storage.orm.vendors import Vendor

_ACTIVE_JOBS = job_codes(ACTIVE_JOB_STATES)
_FINISHED_JOBS = frozenset(job_codes(TERMINAL_JOB_STATES))
GROUP_HEADS = 16
"""Groups (queue and target) a filtered job list reads one by one at most, per
finished state."""
_ACTIVE_INSTANCES = sorted(
    INSTANCE_STATE_CODES[s] for s in set(InstanceState) - TERMINAL_INSTANCE_STATES
)


def _counted(rows: QuerySet[Any], codes: Sequence[int]) -> list[tuple[int, int]]:
    """``(state, count)`` of ``rows`` in each of ``codes`` (unfinished states), in one
    statement of one count per state: each reads its state's partial index alone (an
    ``IN`` over the states would let the planner scan the table), and ``COUNT(*)`` lets
    it count the index entries without visiting each row (a column the index lacks,
    such as ``seq``, would)."""
    parts = [
        rows.filter(state=code).values_list("state").annotate(n=Count("*")).order_by()
        for code in codes
    ]
    return list(parts[0].union(*parts[1:], all=True))


_SUMMARY_FIELDS = (
    "uuid", "queue", "state", "target", "priority", "created_at", "due_at", "finished_at",
    "attempt", "failures", "tenant_id", "worker_id", "workflow_instance_id", "activity_node_id",
)  # fmt: skip


def _newest_first_page[Row: Model, Item](
    sources: Sequence[QuerySet[Row]],
    vendor: Vendor,
    id_field: str,
    cursor: str | None,
    limit: int,
    summarize: Callable[[Row], Item],
) -> Page[Item]:
    """Keyset page over ``(created_at, id)`` descending, ids in RFC 4122 byte order, of
    the rows of ``sources`` (disjoint): each is read in that order through an index of
    its own, at most a page of it, and their heads are merged, by the database in one
    ``UNION ALL`` where it can order and limit each part (else here)."""
    after = decode_time_id(cursor) if cursor is not None else None
    size = clamp_limit(limit)
    heads = [newest_first(rows, vendor, id_field, after, size + 1) for rows in sources]
    if len(heads) == 1:
        fetched = list(heads[0])
    elif _compound_heads(heads[0], vendor, id_field):
        union = heads[0].union(*heads[1:], all=True)
        fetched = list(union.order_by("-created_at", f"-{id_field}")[: size + 1])
    else:
        fetched = _merged([list(head) for head in heads], id_field)[: size + 1]
    page = fetched[:size]
    next_cursor = None
    if len(fetched) > size:
        last = page[-1]
        next_cursor = encode_time_id(last.created_at, getattr(last, id_field))  # type: ignore[attr-defined]
    return Page(items=[summarize(row) for row in page], next_cursor=next_cursor)


def _starting_with(field: str, prefix: str) -> Q:
    """``field`` starts with ``prefix``, as a range of the field's exact (code point)
    order, which an index on it reads on every database (``LIKE`` folds case on some)."""
    last = ord(prefix[-1])
    if last == sys.maxunicode:
        return Q(**{f"{field}__gte": prefix, f"{field}__startswith": prefix})
    following = prefix[:-1] + chr(last + 1)
    return Q(**{f"{field}__gte": prefix, f"{field}__lt": following})


def _compound_heads(head: QuerySet[Any], vendor: Vendor, id_field: str) -> bool:
    """Whether the heads can be merged in SQL: the database orders and limits the parts
    of a compound statement, and the tie-break is the column itself."""
    features = connections[head.db].features
    return features.supports_slicing_ordering_in_compound and vendor.id_order(id_field) == id_field


def _merged[Row: Model](heads: list[list[Row]], id_field: str) -> list[Row]:
    """Newest-first lists merged into one (a UUID compares as its RFC 4122 bytes do)."""

    def key(row: Row) -> tuple[datetime, UUID]:
        return row.created_at, getattr(row, id_field)  # type: ignore[attr-defined]

    return list(heapq.merge(*heads, key=key, reverse=True))


def summarized(rows: QuerySet[Job], ctx: OrmContext) -> QuerySet[Job]:
    """``rows`` with what a summary shows beyond the job row, per row read: whether the
    attempt history holds the latest attempt (a probe of ``millrace_attempt_once``) and
    the definition of the job's workflow instance (a primary-key probe)."""
    latest = ctx.attempts().filter(job_id=OuterRef("seq"), attempt=OuterRef("attempt"))
    instance = ctx.instances().filter(id=OuterRef("workflow_instance_id"))
    return rows.annotate(
        last_attempt_recorded=Exists(latest),
        workflow_definition_id=Subquery(instance.values("definition_id")[:1]),
    )


def summarize_job(row: Job) -> JobSummary:
    """A row read through :func:`summarized` as a list row."""
    return JobSummary(
        id=row.uuid,
        queue=row.queue,
        state=JOB_STATES[row.state],
        target=row.target,
        priority=row.priority,
        created_at=row.created_at,
        due_at=row.due_at,
        finished_at=row.finished_at,
        attempt=row.attempt,
        failures=row.failures,
        tenant_id=row.tenant_id,
        worker_id=row.worker_id,
        last_attempt_recorded=row.last_attempt_recorded,  # type: ignore[attr-defined]
        workflow_instance_id=row.workflow_instance_id,
        activity_node_id=row.activity_node_id,
        workflow_definition_id=row.workflow_definition_id,  # type: ignore[attr-defined]
    )


def summarize_instance(row: WorkflowInstance) -> InstanceSummary:
    return InstanceSummary(
        id=row.id,
        definition_id=row.definition_id,
        definition_version=row.definition_version,
        state=INSTANCE_STATES[row.state],
        tenant_id=row.tenant_id,
        created_at=row.created_at,
        updated_at=row.updated_at,
        revision=row.revision,
    )


class OrmMonitoring:
    """:class:`~millrace_django.contract.MonitoringStorage` over the ORM."""

    def __init__(self, ctx: OrmContext) -> None:
        self._ctx = ctx

    def get_statistics(self, tenant: TenantFilter) -> JobStatistics:
        return self._ctx.tx.read(lambda: self._statistics(tenant))

    def _statistics(self, tenant: TenantFilter) -> JobStatistics:
        ctx, scope = self._ctx, tenant_q(tenant)
        finished = tallies.totals(ctx, tenant)
        jobs_by_state = {
            state: finished.get((TallySubject.JOB, JOB_STATE_CODES[state]), 0) for state in JobState
        }
        for code, n in _counted(ctx.jobs().filter(scope), _ACTIVE_JOBS):
            jobs_by_state[JOB_STATES[code]] = n
        enqueued = ctx.jobs().filter(scope, state=Code.ENQUEUED).values_list("queue")
        instances_by_state = {
            state: finished.get((TallySubject.INSTANCE, INSTANCE_STATE_CODES[state]), 0)
            for state in InstanceState
        }
        for code, n in _counted(ctx.instances().filter(scope), _ACTIVE_INSTANCES):
            instances_by_state[INSTANCE_STATES[code]] = n
        recurring = ctx.recurring().filter(scope)
        per_queue = enqueued.annotate(n=Count("seq"), oldest=Min("created_at")).order_by()
        by_queue = {queue: (n, oldest) for queue, n, oldest in per_queue}
        return JobStatistics(
            jobs_by_state=jobs_by_state,
            enqueued_by_queue={queue: n for queue, (n, _) in by_queue.items()},
            oldest_enqueued_by_queue={queue: at for queue, (_, at) in by_queue.items()},
            instances_by_state=instances_by_state,
            recurring_definitions=recurring.count(),
            overdue_recurring_definitions=recurring.filter(
                ~held(ctx.jobs()), enabled=True, next_fire_time__lte=ctx.clock.now()
            ).count(),
        )

    def query_jobs(self, query: JobQuery) -> Page[JobSummary]:
        rows = summarized(self._ctx.jobs().only(*_SUMMARY_FIELDS), self._ctx).filter(
            tenant_q(query.tenant), created_q(query.created_after, query.created_before)
        )
        if query.queue is not None:
            rows = rows.filter(queue=query.queue)
        if query.target_prefix:
            rows = rows.filter(_starting_with("target", query.target_prefix))
        needle = (query.target_contains or "").strip()
        if needle:
            # Lowered on both sides: the same on every database, whatever the collation.
            rows = rows.alias(_lowered=Lower("target")).filter(_lowered__contains=needle.lower())
        codes = sorted(JOB_STATE_CODES[state] for state in (query.states or JobState))

        def read() -> Page[JobSummary]:
            sources = self._job_sources(rows, codes, query)
            return _newest_first_page(
                sources, self._ctx.vendor, "uuid", query.cursor, query.limit, summarize_job
            )

        return self._ctx.tx.read(read)

    def _job_sources(
        self, rows: QuerySet[Job], codes: Sequence[int], query: JobQuery
    ) -> list[QuerySet[Job]]:
        """What the list merges: one source per state, each read newest first through an
        index (see models.Job), where all states at once have none to be read in that
        order. A finished state narrowed by queue or target is read per group (queue and
        target) of it that the tallies know, each a range of ``millrace_job_finished_group``:
        a page at most, however rare the group. Past :data:`GROUP_HEADS` groups the
        filter is broad, and the state is read whole (newest first, filtered)."""
        if query.tag is not None:
            # The tag's jobs alone, through millrace_job_tag_once, then sorted: fewer
            # rows than any per-state index would read past.
            return [rows.filter(state__in=codes, seq__in=tags.carrying(self._ctx, query.tag))]
        finished = [code for code in codes if code in _FINISHED_JOBS]
        narrowed = query.queue is not None or bool(query.target_prefix)
        groups = self._finished_groups(query, finished) if finished and narrowed else None
        sources: list[QuerySet[Job]] = []
        for code in codes:
            if groups is not None and code in _FINISHED_JOBS:
                sources += [rows.filter(state=code, queue=q, target=t) for q, t in groups]
            else:
                sources.append(rows.filter(state=code))
        return sources

    def _finished_groups(
        self, query: JobQuery, codes: Sequence[int]
    ) -> list[tuple[str, str]] | None:
        """The ``(queue, target)`` groups with finished jobs in ``codes`` that the
        query's filters can match (from the tallies: every finished job is counted in
        its group); ``None`` when there are more than :data:`GROUP_HEADS`."""
        tallied = self._ctx.tallies().filter(
            tenant_q(query.tenant), subject=TallySubject.JOB, state__in=codes
        )
        if query.queue is not None:
            tallied = tallied.filter(queue=query.queue)
        if query.target_prefix:
            tallied = tallied.filter(_starting_with("target", query.target_prefix))
        groups = tallied.values_list("queue", "target").distinct().order_by()
        found = [(queue, target) for queue, target in groups[: GROUP_HEADS + 1]]
        return found if len(found) <= GROUP_HEADS else None

    def get_throughput(self, since: datetime, until: datetime) -> list[ThroughputPoint]:
        """One grouped read of the window's ``millrace_finished_minute`` rows: about one
        per minute and state, however many jobs finished (see :mod:`.tallies`)."""
        minutes = throughput_window(since, until)
        if not minutes:
            return []
        start, end = minutes[0], minutes[-1] + timedelta(minutes=1)
        counts = {minute: [0, 0] for minute in minutes}
        for minute, code, n in self._ctx.tx.read(lambda: tallies.per_minute(self._ctx, start, end)):
            key = floor_minute(minute)
            if key in counts and code == Code.SUCCEEDED:
                counts[key][0] += n
            elif key in counts and code == Code.DEAD:
                counts[key][1] += n
        return [
            ThroughputPoint(minute=minute, succeeded=ok, failed=dead)
            for minute, (ok, dead) in counts.items()
        ]

    def query_instances(self, query: InstanceQuery) -> Page[InstanceSummary]:
        rows = (
            self._ctx.instances()
            .defer("data", "cursor")
            .filter(tenant_q(query.tenant), created_q(query.created_after, query.created_before))
        )
        if query.definition_id is not None:
            rows = rows.filter(definition_id=query.definition_id)
            if query.definition_version is not None:
                rows = rows.filter(definition_version=query.definition_version)
        # A state filter reads each state through millrace_instance_state.
        codes = sorted(INSTANCE_STATE_CODES[s] for s in query.states)
        sources = [rows.filter(state=code) for code in codes] if codes else [rows]
        return self._ctx.tx.read(
            lambda: _newest_first_page(
                sources, self._ctx.vendor, "id", query.cursor, query.limit, summarize_instance
            )
        )

    def get_job_details(self, job_id: UUID) -> JobDetails | None:
        def read() -> tuple[Job | None, list[JobAttempt], list[JobLogLine], list[JobSummary]]:
            row = summarized(self._ctx.jobs(), self._ctx).filter(uuid=job_id).first()
            if row is None:
                return None, [], [], []
            attempts = self._ctx.attempts().filter(job_id=row.seq).order_by("-attempt")
            newest_logs = self._ctx.logs().filter(job_id=row.seq).order_by("-id")
            children = summarized(self._ctx.jobs().only(*_SUMMARY_FIELDS), self._ctx).filter(
                parent_id=job_id
            )  # through millrace_job_parent
            newest_children = newest_first(
                children, self._ctx.vendor, "uuid", None, CONTINUATION_CAP
            )
            return (
                row,
                [
                    JobAttempt(
                        attempt=a.attempt,
                        outcome=ATTEMPT_OUTCOMES[a.outcome],
                        recorded_at=a.recorded_at,
                        worker_id=a.worker_id,
                        error=a.error,
                    )
                    for a in attempts[:ATTEMPT_HISTORY_CAP]
                ],
                [
                    JobLogLine(at=line.at, message=line.message)
                    for line in reversed(newest_logs[:LOG_LINE_CAP])
                ],
                [summarize_job(child) for child in newest_children],
            )

        row, attempts, logs, continuations = self._ctx.tx.read(read)
        if row is None:
            return None
        return JobDetails(
            summary=summarize_job(row),
            invocation=invocation_of(row.target, row.arguments),
            retry=row_retry(row.retry),
            timeout=row.timeout,
            idempotency_key=row.idempotency_key,
            parent_id=row.parent_id,
            requeued_from=row.requeued_from,
            recurring_id=row.recurring_id,
            last_error=row.last_error,
            result=row.result,
            progress=row.progress,
            checkpoint=row.checkpoint,
            logs=logs,
            lease_until=row.lease_until,
            cancel_requested=row.cancel_requested,
            attempts=attempts,
            continuations=continuations,
            expires_at=row.expires_at,
            hard_timeout=row.hard_timeout,
            tags=self._ctx.tx.read(lambda: tags.of_job(self._ctx, row.seq)),
        )

    def query_recurring(self, query: RecurringQuery) -> Page[RecurringSummary]:
        newest_fired = (
            self._ctx.jobs()
            .filter(recurring_id=OuterRef("id"))
            .order_by("-created_at", descending(self._ctx.vendor.id_order("uuid")))
        )
        rows = (
            self._ctx.recurring()
            .defer("arguments", "retry")
            .filter(tenant_q(query.tenant))
            .annotate(
                last_state=Subquery(newest_fired.values("state")[:1]),
                last_job=Subquery(newest_fired.values("uuid")[:1]),
            )
        )
        if query.queue is not None:
            rows = rows.filter(queue=query.queue)
        if query.cursor is not None:
            at, last_id = decode_time_text(query.cursor)
            rows = rows.filter(Q(next_fire_time__gt=at) | Q(next_fire_time=at, id__gt=last_id))
        size = clamp_limit(query.limit)
        fetched = self._ctx.tx.read(lambda: list(rows.order_by("next_fire_time", "id")[: size + 1]))
        page = fetched[:size]
        next_cursor = None
        if len(fetched) > size:
            next_cursor = encode_time_text(page[-1].next_fire_time, page[-1].id)
        return Page(items=[_summarize_recurring(row) for row in page], next_cursor=next_cursor)


def _summarize_recurring(row: Recurring) -> RecurringSummary:
    last_state: int | None = row.last_state  # type: ignore[attr-defined]
    last_job: UUID | None = row.last_job  # type: ignore[attr-defined]
    return RecurringSummary(
        id=row.id,
        cron=row.cron,
        timezone=row.timezone,
        queue=row.queue,
        target=row.target,
        priority=row.priority,
        tenant_id=row.tenant_id,
        next_fire_time=row.next_fire_time,
        last_fire_time=row.last_fire_time,
        last_outcome=JOB_STATES[last_state] if last_state is not None else None,
        last_job_id=last_job,
        created_at=row.created_at,
        updated_at=row.updated_at,
        overlap=OverlapPolicy(row.overlap),
        last_skip_time=row.last_skip_time,
        enabled=row.enabled,
    )
