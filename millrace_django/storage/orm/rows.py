"""Conversions between the contract's records and the ORM's rows, in one place."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

from millrace_django.contract import (
    ACTIVE_JOB_STATES,
    BookmarkRecord,
    Invocation,
    JobRecord,
    Limit,
    OverlapPolicy,
    RecurringRecord,
    RetrySpec,
    WorkflowInstanceRecord,
    limits_json,
    limits_of,
    retry_json,
    retry_of,
)
from millrace_django.models import (
    INSTANCE_STATE_CODES,
    INSTANCE_STATES,
    JOB_STATE_CODES,
    JOB_STATES,
    Bookmark,
    Job,
    Recurring,
)

_JOB_FIELDS = [f.attname for f in Job._meta.concrete_fields]


def key_digest(tenant_id: str | None, key: str) -> str:
    """The fixed-width identity of an idempotency scope; the null tenant is its own."""
    scope = json.dumps([tenant_id, key], separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(scope.encode("utf-8")).hexdigest()


def active_scope(job: JobRecord) -> str | None:
    """The scope ``job`` holds as stored, or ``None`` (no key, or not active)."""
    if job.idempotency_key is None or job.state not in ACTIVE_JOB_STATES:
        return None
    return key_digest(job.tenant_id, job.idempotency_key)


def arguments_json(invocation: Invocation) -> dict[str, Any]:
    return {"args": list(invocation.args), "kwargs": dict(invocation.kwargs)}


_NO_ARGUMENTS_TEXT = '{"args": [], "kwargs": {}}'
"""The stored arguments of a call without any, as :func:`json.dumps` writes them and as
PostgreSQL's ``jsonb`` reads back: spelled out, so the hot paths skip the codec for the
commonest arguments of all."""


def arguments_text(invocation: Invocation) -> str:
    """``invocation``'s arguments as stored, in JSON."""
    if not invocation.args and not invocation.kwargs:
        return _NO_ARGUMENTS_TEXT
    return json.dumps(arguments_json(invocation))


def invocation_of(target: str, arguments: Any) -> Invocation:
    """The invocation a row stores. Arguments of another shape (a hand-edited row) are
    passed on as found, for the engine to refuse when the job is about to run (dead,
    ``InvalidStoredArguments``): raising here would fail the whole claim after it
    committed, every time, so the batch it leased would never run."""
    if not isinstance(arguments, dict):
        return Invocation(target=target, args=arguments, kwargs={})
    args: Any = arguments.get("args")
    kwargs: Any = arguments.get("kwargs")
    return Invocation(target=target, args=args, kwargs=kwargs)


def row_retry(stored: Any) -> RetrySpec:
    """The retry policy a row stores. A policy of another shape (a hand-edited row) reads
    as "no retries": raising here would fail the whole claim after it committed, every
    time, so the batch it leased would never run; the job itself can still run once."""
    try:
        return retry_of(stored)
    except (KeyError, TypeError, ValueError):
        return UNREADABLE_RETRY


UNREADABLE_RETRY = RetrySpec()


def job_values(job: JobRecord, *, track_scope: bool) -> dict[str, Any]:
    """The columns of a new row for ``job``, keyed by field name; ``key_scope`` is filled
    only where it enforces uniqueness."""
    return {
        "uuid": job.id,
        "queue": job.queue,
        "state": JOB_STATE_CODES[job.state],
        "priority": job.priority,
        "target": job.invocation.target,
        "arguments": arguments_json(job.invocation),
        "retry": retry_json(job.retry),
        "timeout": job.timeout,
        "hard_timeout": job.hard_timeout,
        "created_at": job.created_at,
        "due_at": job.due_at,
        "worker_id": job.worker_id,
        "lease_until": job.lease_until,
        "attempt": job.attempt,
        "failures": job.failures,
        "cancel_requested": job.cancel_requested,
        "idempotency_key": job.idempotency_key,
        "tenant_id": job.tenant_id,
        "key_scope": active_scope(job) if track_scope else None,
        "parent_id": job.parent_id,
        "requeued_from": job.requeued_from,
        "trace_parent": job.trace_parent,
        "recurring_id": job.recurring_id,
        "last_error": job.last_error,
        "result": job.result,
        "progress": job.progress,
        "checkpoint": job.checkpoint,
        "finished_at": job.finished_at,
        "workflow_instance_id": job.workflow_instance_id,
        "activity_node_id": job.activity_node_id,
        "expires_at": job.expires_at,
        "started_at": job.started_at,
        "limited": bool(job.limits),
        "limits": limits_json(job.limits),
        "limit_key": limit_key(job.limits),
    }


def limit_key(limits: Sequence[Limit]) -> str | None:
    """The narrowest scope of ``limits`` (the function's, or its key's, else the queue's),
    stored so that a claim can skip the jobs of a scope that is full without reading
    their limits."""
    return limits[-1].scope if limits else None


def job_row(job: JobRecord, *, track_scope: bool) -> Job:
    """A new row for ``job`` (see :func:`job_values`)."""
    return Job(**job_values(job, track_scope=track_scope))


def job_record(row: Job, **changes: Any) -> JobRecord:
    """The record a row stores, with ``changes`` applied on top (e.g. a claim's lease)."""
    return job_record_of({name: getattr(row, name) for name in _JOB_FIELDS}, **changes)


_AS_STORED = (
    "queue", "priority", "timeout", "created_at", "due_at", "worker_id", "lease_until",
    "attempt", "failures", "cancel_requested", "idempotency_key", "tenant_id", "parent_id",
    "hard_timeout",
    "requeued_from", "trace_parent", "recurring_id", "last_error", "result", "progress",
    "checkpoint", "finished_at", "workflow_instance_id", "activity_node_id", "expires_at",
    "started_at",
)  # fmt: skip
"""Record fields stored as they are, each in the column of its name (the others: ``id``
in ``uuid``, ``invocation`` in ``target`` and ``arguments``, and ``state`` and
``retry`` encoded)."""


def job_record_of(values: Mapping[str, Any], **changes: Any) -> JobRecord:
    """The record of a row given as its column values keyed by field name (JSON
    decoded), with ``changes`` applied on top."""
    record = {name: values[name] for name in _AS_STORED}
    record.update(
        id=values["uuid"],
        invocation=invocation_of(values["target"], values["arguments"]),
        state=JOB_STATES[values["state"]],
        retry=row_retry(values["retry"]),
        limits=limits_of(values["limits"]),
    )
    record.update(changes)
    return JobRecord.from_values(record)


class JobRowReader:
    """Records from rows of ``columns`` (a statement's output, JSON still text), built
    straight from the tuples a cursor returns, for the claim, which reads every job a
    worker runs. The statement lists the columns stored as they are first (see
    :attr:`columns`); the values of ``known`` fields, which it leaves out (what a claim
    knows without reading it back: its lease, say), are given to :meth:`read`. That the
    columns and the known names make every field is checked here, once, so each record
    is built without comparing every name
    (:meth:`~millrace_django.contract.records.JobRecord.from_complete`)."""

    def __init__(self, known: Sequence[str]) -> None:
        self._known = frozenset(known)
        self._stored = tuple(name for name in _AS_STORED if name not in self._known)
        self._json = tuple(
            name for name in ("result", "progress", "checkpoint") if name in self._stored
        )
        tail = ("uuid", "target", "arguments", "retry", "limits", "state")
        if set(tail[:5]) & self._known:
            raise ValueError(f"a row reader must read {tail[:5]} itself")
        self._tail = tuple(name for name in tail if name not in self._known)
        self._id, self._target, self._arguments, self._retry, self._limits = (
            len(self._stored) + n for n in range(5)
        )
        self._state = len(self._stored) + 5 if "state" in self._tail else None
        given = {*self._stored, *known, "id", "invocation", "state", "retry", "limits"}
        self._defaults = JobRecord.defaults_besides(given)

    @property
    def columns(self) -> list[str]:
        """The columns a statement returns, in this order."""
        return [*self._stored, *self._tail]

    def read(self, row: Sequence[Any], known: Mapping[str, Any]) -> JobRecord:
        """The record of ``row`` with the ``known`` values (exactly the names given at
        construction)."""
        if known.keys() != self._known:
            raise ValueError(f"known values of {sorted(known)}, not of {sorted(self._known)}")
        record = dict(zip(self._stored, row, strict=False))  # the stored ones come first
        for name in self._json:
            if record[name] is not None:
                record[name] = json.loads(record[name])
        record.update(known)
        record.update(self._defaults)
        record["id"] = row[self._id]
        target, arguments = row[self._target], row[self._arguments]
        record["invocation"] = (
            Invocation.without_arguments(target)
            if arguments == _NO_ARGUMENTS_TEXT
            else invocation_of(target, json.loads(arguments))
        )
        if self._state is not None:
            record["state"] = JOB_STATES[row[self._state]]
        record["retry"] = _retry_from_text(row[self._retry])
        limits = row[self._limits]
        record["limits"] = () if limits is None else _limits_from_text(limits)
        return JobRecord.from_complete(record)


@lru_cache(maxsize=64)
def _limits_from_text(text: str) -> tuple[Limit, ...]:
    """Stored limits, read once per distinct text (a limited function's jobs share one)."""
    return limits_of(json.loads(text))


@lru_cache(maxsize=64)
def _retry_from_text(text: str) -> RetrySpec:
    """A stored retry policy, read once per distinct text (most jobs share a few)."""
    return row_retry(json.loads(text))


def recurring_fields(record: RecurringRecord) -> dict[str, Any]:
    """Every column of a recurring definition, keyed by field name."""
    return {
        "cron": record.cron,
        "timezone": record.timezone,
        "queue": record.queue,
        "target": record.invocation.target,
        "arguments": arguments_json(record.invocation),
        "retry": retry_json(record.retry),
        "priority": record.priority,
        "tenant_id": record.tenant_id,
        "next_fire_time": record.next_fire_time,
        "last_fire_time": record.last_fire_time,
        "overlap": record.overlap.value,
        "fired_job_id": record.fired_job_id,
        "last_skip_time": record.last_skip_time,
        "enabled": record.enabled,
        "created_at": record.created_at,
        "updated_at": record.updated_at,
    }


def recurring_record(row: Recurring) -> RecurringRecord:
    return RecurringRecord(
        id=row.id,
        cron=row.cron,
        timezone=row.timezone,
        queue=row.queue,
        invocation=invocation_of(row.target, row.arguments),
        retry=row_retry(row.retry),
        priority=row.priority,
        tenant_id=row.tenant_id,
        next_fire_time=row.next_fire_time,
        last_fire_time=row.last_fire_time,
        overlap=OverlapPolicy(row.overlap),
        fired_job_id=row.fired_job_id,
        last_skip_time=row.last_skip_time,
        enabled=row.enabled,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


def instance_fields(instance: WorkflowInstanceRecord, revision: int) -> dict[str, Any]:
    """Every column of an instance but its id, stored at ``revision``."""
    return {
        "definition_id": instance.definition_id,
        "definition_version": instance.definition_version,
        "state": INSTANCE_STATE_CODES[instance.state],
        "data": instance.data,
        "cursor": instance.cursor,
        "revision": revision,
        "tenant_id": instance.tenant_id,
        "created_at": instance.created_at,
        "updated_at": instance.updated_at,
    }


INSTANCE_COLUMNS = (
    "id",
    "definition_id",
    "definition_version",
    "state",
    "data",
    "cursor",
    "revision",
    "tenant_id",
    "created_at",
    "updated_at",
)
"""What :func:`instance_record` reads, in its order."""


def instance_record(values: Sequence[Any]) -> WorkflowInstanceRecord:
    """The instance read as :data:`INSTANCE_COLUMNS`: values, not a model, since the
    worker reads the instances of a claimed batch's workflow steps with every claim."""
    (id_, definition, version, state, data, cursor, revision, tenant, created, updated) = values
    return WorkflowInstanceRecord(
        id=id_,
        definition_id=definition,
        definition_version=version,
        state=INSTANCE_STATES[state],
        data=data,
        cursor=cursor,
        revision=revision,
        tenant_id=tenant,
        created_at=created,
        updated_at=updated,
    )


def bookmark_row(bookmark: BookmarkRecord) -> Bookmark:
    return Bookmark(
        id=bookmark.id,
        instance_id=bookmark.instance_id,
        signal_name=bookmark.signal_name,
        correlation_id=bookmark.correlation_id,
        payload_type=bookmark.payload_type,
        created_at=bookmark.created_at,
    )


def bookmark_record(row: Bookmark) -> BookmarkRecord:
    return BookmarkRecord(
        id=row.id,
        instance_id=row.instance_id,
        signal_name=row.signal_name,
        correlation_id=row.correlation_id,
        payload_type=row.payload_type,
        created_at=row.created_at,
    )
