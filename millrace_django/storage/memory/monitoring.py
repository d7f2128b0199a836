"""The in-memory read model: filters, keyset pages and statistics over a snapshot."""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import TypeVar
from uuid import UUID

from millrace_django.contract import (
    CONTINUATION_CAP,
    CatalogEntry,
    InstanceQuery,
    InstanceState,
    InstanceSummary,
    JobDetails,
    JobQuery,
    JobRecord,
    JobState,
    JobStatistics,
    JobSummary,
    LimitUsage,
    Page,
    RecurringQuery,
    RecurringRecord,
    RecurringSummary,
    TenantFilter,
    ThroughputPoint,
    WorkflowInstanceRecord,
    clamp_limit,
    decode_time_id,
    decode_time_text,
    encode_time_id,
    encode_time_text,
    floor_minute,
    throughput_window,
    usage_by_scope,
)
from millrace_django.storage.memory.catalog import catalog
from millrace_django.storage.memory.store import MemoryJobStore, held
from millrace_django.storage.memory.tables import Tables

Row = TypeVar("Row")
Item = TypeVar("Item")


def _in_created_range(
    created_at: datetime, after: datetime | None, before: datetime | None
) -> bool:
    return (after is None or created_at >= after) and (before is None or created_at < before)


def _newest_first_page[Row, Item](
    rows: Iterable[Row],
    key: Callable[[Row], tuple[datetime, UUID]],
    cursor: str | None,
    limit: int,
    summarize: Callable[[Row], Item],
) -> Page[Item]:
    """Keyset page over ``(created_at, id)`` descending; ids tie-break in byte order."""
    ordered = sorted(rows, key=key, reverse=True)
    if cursor is not None:
        boundary = decode_time_id(cursor)
        ordered = [row for row in ordered if key(row) < boundary]
    size = clamp_limit(limit)
    page = ordered[:size]
    more = len(ordered) > size
    next_cursor = encode_time_id(*key(page[-1])) if more and page else None
    return Page(items=[summarize(row) for row in page], next_cursor=next_cursor)


def _job_key(job: JobRecord) -> tuple[datetime, UUID]:
    return (job.created_at, job.id)


def _instance_key(instance: WorkflowInstanceRecord) -> tuple[datetime, UUID]:
    return (instance.created_at, instance.id)


def summarize_job(job: JobRecord, tables: Tables) -> JobSummary:
    """``job`` as a list row (read under the store's lock: its history and instance too)."""
    flow = job.workflow_instance_id
    instance = tables.instances.get(flow) if flow is not None else None
    return JobSummary.of(
        job,
        last_attempt_recorded=job.attempt in tables.attempts.get(job.id, {}),
        workflow_definition_id=instance.definition_id if instance is not None else None,
    )


class MemoryMonitoring:
    """The read model over a :class:`MemoryJobStore`'s tables."""

    def __init__(self, store: MemoryJobStore) -> None:
        self._store = store

    def get_statistics(self, tenant: TenantFilter) -> JobStatistics:
        with self._store._reading() as tables:
            jobs = [job for job in tables.jobs.values() if tenant.matches(job.tenant_id)]
            instances = [i for i in tables.instances.values() if tenant.matches(i.tenant_id)]
            recurring = [r for r in tables.recurring.values() if tenant.matches(r.tenant_id)]
            waiting = {r.id for r in recurring if held(tables, r)}
        by_state = dict.fromkeys(JobState, 0)
        by_queue: dict[str, int] = {}
        oldest: dict[str, datetime] = {}
        for job in jobs:
            by_state[job.state] += 1
            if job.state is JobState.ENQUEUED:
                by_queue[job.queue] = by_queue.get(job.queue, 0) + 1
                oldest[job.queue] = min(oldest.get(job.queue, job.created_at), job.created_at)
        instances_by_state = dict.fromkeys(InstanceState, 0)
        for instance in instances:
            instances_by_state[instance.state] += 1
        now = self._store.clock.now()
        return JobStatistics(
            jobs_by_state=by_state,
            enqueued_by_queue=by_queue,
            oldest_enqueued_by_queue=oldest,
            instances_by_state=instances_by_state,
            recurring_definitions=len(recurring),
            overdue_recurring_definitions=sum(
                r.enabled and r.next_fire_time <= now and r.id not in waiting for r in recurring
            ),
        )

    def query_jobs(self, query: JobQuery) -> Page[JobSummary]:
        needle = (query.target_contains or "").strip().casefold()
        with self._store._reading() as tables:
            rows = [
                job
                for job in tables.jobs.values()
                if (not query.states or job.state in query.states)
                and (query.queue is None or job.queue == query.queue)
                and query.tenant.matches(job.tenant_id)
                and _in_created_range(job.created_at, query.created_after, query.created_before)
                and (not needle or needle in job.invocation.target.casefold())
                and job.invocation.target.startswith(query.target_prefix or "")
                and (query.tag is None or query.tag in job.tags)
            ]
            return _newest_first_page(
                rows, _job_key, query.cursor, query.limit, lambda job: summarize_job(job, tables)
            )

    def get_catalog(
        self, tenant: TenantFilter, target: str | None = None, tag: str | None = None
    ) -> list[CatalogEntry]:
        with self._store._reading() as tables:
            return catalog(tables, tenant, target, tag, self._store.clock.now())

    def fold_statistics(self, limit: int) -> int:
        """Nothing to fold: memory counts its own tables."""
        return 0

    def get_limit_usage(self) -> list[LimitUsage]:
        with self._store._reading() as tables:
            active = [tables.jobs[job_id] for job_id in tables.ready]  # enqueued, processing
        running = [job.limits for job in active if job.state is JobState.PROCESSING]
        waiting = Counter(job.limits for job in active if job.state is JobState.ENQUEUED)
        return usage_by_scope(
            (limits for limits in running if limits),
            ((limits, n) for limits, n in waiting.items() if limits),
        )

    def get_throughput(self, since: datetime, until: datetime) -> list[ThroughputPoint]:
        minutes = throughput_window(since, until)
        if not minutes:
            return []
        start, end = minutes[0], minutes[-1] + timedelta(minutes=1)
        counts = {minute: [0, 0] for minute in minutes}
        with self._store._reading() as tables:
            for job in tables.jobs.values():
                at = job.finished_at
                if at is None or not start <= at < end:
                    continue
                if job.state is JobState.SUCCEEDED:
                    counts[floor_minute(at)][0] += 1
                elif job.state is JobState.DEAD:
                    counts[floor_minute(at)][1] += 1
        return [
            ThroughputPoint(minute=minute, succeeded=ok, failed=dead)
            for minute, (ok, dead) in counts.items()
        ]

    def query_instances(self, query: InstanceQuery) -> Page[InstanceSummary]:
        version = query.definition_version if query.definition_id is not None else None
        with self._store._reading() as tables:
            rows = [
                i
                for i in tables.instances.values()
                if (not query.states or i.state in query.states)
                and (query.definition_id is None or i.definition_id == query.definition_id)
                and (version is None or i.definition_version == version)
                and query.tenant.matches(i.tenant_id)
                and _in_created_range(i.created_at, query.created_after, query.created_before)
            ]
        return _newest_first_page(
            rows, _instance_key, query.cursor, query.limit, InstanceSummary.of
        )

    def get_job_details(self, job_id: UUID) -> JobDetails | None:
        with self._store._reading() as tables:
            job = tables.jobs.get(job_id)
            if job is None:
                return None
            attempts = dict(tables.attempts.get(job_id, {}))
            logs = tables.logs.get(job_id, ())
            summary = summarize_job(job, tables)
            children = (child for child in tables.jobs.values() if child.parent_id == job_id)
            newest = heapq.nlargest(CONTINUATION_CAP, children, key=_job_key)
            continuations = [summarize_job(child, tables) for child in newest]
        return JobDetails(
            summary=summary,
            invocation=job.invocation,
            retry=job.retry,
            timeout=job.timeout,
            idempotency_key=job.idempotency_key,
            parent_id=job.parent_id,
            requeued_from=job.requeued_from,
            recurring_id=job.recurring_id,
            last_error=job.last_error,
            result=job.result,
            progress=job.progress,
            checkpoint=job.checkpoint,
            logs=logs,
            lease_until=job.lease_until,
            cancel_requested=job.cancel_requested,
            attempts=[attempts[n] for n in sorted(attempts, reverse=True)],
            continuations=continuations,
            expires_at=job.expires_at,
            hard_timeout=job.hard_timeout,
            tags=job.tags,
        )

    def query_recurring(self, query: RecurringQuery) -> Page[RecurringSummary]:
        with self._store._reading() as tables:
            rows = sorted(
                (
                    r
                    for r in tables.recurring.values()
                    if (query.queue is None or r.queue == query.queue)
                    and query.tenant.matches(r.tenant_id)
                ),
                key=lambda r: (r.next_fire_time, r.id),
            )
            if query.cursor is not None:
                boundary = decode_time_text(query.cursor)
                rows = [r for r in rows if (r.next_fire_time, r.id) > boundary]
            size = clamp_limit(query.limit)
            page = rows[:size]
            last_jobs = self._last_fired_jobs(tables.jobs.values(), {r.id for r in page})
        next_cursor = None
        if len(rows) > size and page:
            next_cursor = encode_time_text(page[-1].next_fire_time, page[-1].id)
        items = [self._summarize_recurring(r, last_jobs.get(r.id)) for r in page]
        return Page(items=items, next_cursor=next_cursor)

    @staticmethod
    def _last_fired_jobs(jobs: Iterable[JobRecord], ids: set[str]) -> dict[str, JobRecord]:
        latest: dict[str, JobRecord] = {}
        for job in jobs:
            if job.recurring_id in ids:
                held = latest.get(job.recurring_id)
                if held is None or _job_key(job) > _job_key(held):
                    latest[job.recurring_id] = job
        return latest

    @staticmethod
    def _summarize_recurring(record: RecurringRecord, last: JobRecord | None) -> RecurringSummary:
        return RecurringSummary(
            id=record.id,
            cron=record.cron,
            timezone=record.timezone,
            queue=record.queue,
            target=record.invocation.target,
            priority=record.priority,
            tenant_id=record.tenant_id,
            next_fire_time=record.next_fire_time,
            last_fire_time=record.last_fire_time,
            last_outcome=last.state if last is not None else None,
            last_job_id=last.id if last is not None else None,
            created_at=record.created_at,
            updated_at=record.updated_at,
            overlap=record.overlap,
            last_skip_time=record.last_skip_time,
            enabled=record.enabled,
        )
