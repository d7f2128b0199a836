"""The API's wire format: camelCase keys, states as their stored names (``"dead"``),
ids as hyphenated UUID strings, instants as ISO 8601 in UTC, durations in seconds.

Scoped to the dashboard: nothing here changes how the host project serializes JSON.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID

from millrace_django.contract import (
    JSON,
    CatalogEntry,
    InstanceSummary,
    JobAttempt,
    JobDetails,
    JobStatistics,
    JobSummary,
    LimitUsage,
    Page,
    RecurringSummary,
    RetrySpec,
)
from millrace_django.dashboard.services import InstanceView, RegisteredWorker


def instant(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def uid(value: UUID | None) -> str | None:
    return str(value) if value is not None else None


def seconds(value: timedelta | None) -> float | None:
    return value.total_seconds() if value is not None else None


def page[T](items: Page[T], item: Callable[[T], dict[str, Any]]) -> dict[str, Any]:
    """``{"items": [...], "nextCursor": ...}``: no totals, ever."""
    return {"items": [item(i) for i in items.items], "nextCursor": items.next_cursor}


def job_summary(job: JobSummary) -> dict[str, Any]:
    return {
        "id": str(job.id),
        "queue": job.queue,
        "state": job.state.value,
        "target": job.target,
        "priority": job.priority,
        "createdAt": instant(job.created_at),
        "dueAt": instant(job.due_at),
        "finishedAt": instant(job.finished_at),
        "attempt": job.attempt,
        "failures": job.failures,
        "interruptions": job.interruptions,
        "tenantId": job.tenant_id,
        "workerId": job.worker_id,
        "workflowInstanceId": uid(job.workflow_instance_id),
        "workflowDefinitionId": job.workflow_definition_id,
        "activityNodeId": job.activity_node_id,
    }


def retry(spec: RetrySpec) -> dict[str, Any]:
    return {
        "kind": spec.kind.value,
        "maxAttempts": spec.max_attempts,
        "baseDelay": seconds(spec.base_delay),
        "maxDelay": seconds(spec.max_delay),
        "jitter": spec.jitter,
        "retryOn": list(spec.retry_on),
        "giveUpOn": list(spec.give_up_on),
    }


def attempt(entry: JobAttempt) -> dict[str, Any]:
    return {
        "attempt": entry.attempt,
        "outcome": entry.outcome.value,
        "recordedAt": instant(entry.recorded_at),
        "workerId": entry.worker_id,
        "error": entry.error,
    }


def job_details(details: JobDetails) -> dict[str, Any]:
    return {
        **job_summary(details.summary),
        "invocation": {
            "target": details.invocation.target,
            "args": list(details.invocation.args),
            "kwargs": dict(details.invocation.kwargs),
        },
        "retry": retry(details.retry),
        "timeout": seconds(details.timeout),
        "hardTimeout": seconds(details.hard_timeout),
        "idempotencyKey": details.idempotency_key,
        "parentId": uid(details.parent_id),
        "requeuedFrom": uid(details.requeued_from),
        "recurringId": details.recurring_id,
        "tags": list(details.tags),
        "expiresAt": instant(details.expires_at),
        "lastError": details.last_error,
        "result": details.result,
        "progress": details.progress,
        "checkpoint": details.checkpoint,
        "logs": [{"at": instant(line.at), "message": line.message} for line in details.logs],
        "leaseUntil": instant(details.lease_until),
        "cancelRequested": details.cancel_requested,
        "attempts": [attempt(a) for a in details.attempts],
        "continuations": [job_summary(child) for child in details.continuations],
    }


def catalog_entry(entry: CatalogEntry) -> dict[str, Any]:
    return {
        "target": entry.target,
        "jobsByState": {state.value: n for state, n in entry.jobs_by_state.items()},
        "failureRate": entry.failure_rate,
        "lastError": entry.last_error,
        "lastErrorJobId": uid(entry.last_error_job),
        "lastErrorAt": instant(entry.last_error_at),
        "recentRuns": entry.recent_runs,
        "runTimeP50": seconds(entry.run_time_p50),
        "runTimeP95": seconds(entry.run_time_p95),
        "tags": list(entry.tags),
    }


def recurring_summary(item: RecurringSummary) -> dict[str, Any]:
    return {
        "id": item.id,
        "cron": item.cron,
        "timezone": item.timezone,
        "queue": item.queue,
        "target": item.target,
        "priority": item.priority,
        "tenantId": item.tenant_id,
        "nextFireTime": instant(item.next_fire_time),
        "lastFireTime": instant(item.last_fire_time),
        "lastOutcome": item.last_outcome.value if item.last_outcome is not None else None,
        "lastJobId": uid(item.last_job_id),
        "overlap": item.overlap.value,
        "lastSkipTime": instant(item.last_skip_time),
        "enabled": item.enabled,
        "createdAt": instant(item.created_at),
        "updatedAt": instant(item.updated_at),
    }


def instance_summary(item: InstanceSummary) -> dict[str, Any]:
    return {
        "id": str(item.id),
        "definitionId": item.definition_id,
        "definitionVersion": item.definition_version,
        "state": item.state.value,
        "tenantId": item.tenant_id,
        "createdAt": instant(item.created_at),
        "updatedAt": instant(item.updated_at),
        "revision": item.revision,
    }


def instance_details(found: InstanceView) -> dict[str, Any]:
    record, view = found.record, found.view
    position: dict[str, JSON] | None = found.position.to_json() if found.position else None
    return {
        "id": str(record.id),
        "definitionId": record.definition_id,
        "definitionVersion": record.definition_version,
        "state": record.state.value,
        "tenantId": record.tenant_id,
        "createdAt": instant(record.created_at),
        "updatedAt": instant(record.updated_at),
        "revision": record.revision,
        "data": record.data,
        "error": view.error,
        "failedNode": view.failed_node,
        "stuck": [
            {"jobId": str(s.job_id), "kind": s.kind, "node": s.node, "error": s.error}
            for s in view.stuck
        ],
        "pendingJobs": [
            {"jobId": str(job_id), "kind": kind, "node": node}
            for job_id, kind, node in found.pending_jobs
        ],
        "position": position,
    }


def statistics(stats: JobStatistics) -> dict[str, Any]:
    return {
        "jobsByState": {state.value: n for state, n in stats.jobs_by_state.items()},
        "enqueuedByQueue": dict(sorted(stats.enqueued_by_queue.items())),
        "instancesByState": {state.value: n for state, n in stats.instances_by_state.items()},
        "recurringDefinitions": stats.recurring_definitions,
        "overdueRecurringDefinitions": stats.overdue_recurring_definitions,
    }


def limit_usage(usage: LimitUsage) -> dict[str, Any]:
    kind, _, name = usage.scope.partition(":")
    return {
        "scope": usage.scope,
        "kind": kind,
        "name": name,
        "concurrency": usage.concurrency,
        "rate": None if usage.rate is None else str(usage.rate),
        "running": usage.running,
        "waiting": usage.waiting,
        "keys": usage.keys,
    }


def registered_worker(worker: RegisteredWorker) -> dict[str, Any]:
    beat = worker.heartbeat
    return {
        "workerId": beat.worker_id,
        "hostname": beat.hostname,
        "pid": beat.pid,
        "queues": worker.queues,
        "concurrency": beat.concurrency,
        "inFlight": beat.in_flight,
        "startedAt": instant(beat.started_at),
        "seenAt": instant(beat.seen_at),
        "gone": worker.gone,
    }


MAX_JSON_DEPTH = 100
"""How deep a JSON body (a signal's payload) may nest: deeper is refused, before the
parser or anything after it runs out of stack."""


def read_json(text: str) -> Any:
    """A JSON body as Python values; a :class:`ValueError` saying why it is refused."""
    too_deep = f"The JSON nests deeper than {MAX_JSON_DEPTH} levels, the most accepted."
    try:
        value = json.loads(text)
    except RecursionError:
        raise ValueError(too_deep) from None
    except ValueError as error:
        raise ValueError(f"Not valid JSON: {error}") from error
    if _deeper_than(value, MAX_JSON_DEPTH):
        raise ValueError(too_deep)
    return value


def _deeper_than(value: Any, limit: int) -> bool:
    pending = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, dict):
            item = list(item.values())
        if isinstance(item, list):
            if depth > limit:
                return True
            pending.extend((child, depth + 1) for child in item)
    return False


def problem(status: int, title: str, detail: str | None = None, **extra: Any) -> dict[str, Any]:
    """An RFC 9457 problem document."""
    body: dict[str, Any] = {"type": "about:blank", "title": title, "status": status}
    if detail is not None:
        body["detail"] = detail
    body.update(extra)
    return body


def form_errors(errors: Mapping[str, Any], rename: Mapping[str, str]) -> dict[str, list[str]]:
    """A form's errors keyed by the API's parameter names."""
    back = {form: api for api, form in rename.items()}
    return {
        back.get(field, field): [str(e) for e in messages] for field, messages in errors.items()
    }
