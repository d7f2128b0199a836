"""The in-memory tables, their indexes, and an undo log that makes each call atomic."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from uuid import UUID

from millrace_django.contract import (
    ACTIVE_JOB_STATES,
    BookmarkRecord,
    JobAttempt,
    JobLogLine,
    JobRecord,
    JobState,
    RecurringRecord,
    WorkerHeartbeat,
    WorkflowInstanceRecord,
)

KeyScope = tuple[str | None, str]
_READY = frozenset({JobState.ENQUEUED, JobState.PROCESSING})
_DUE = frozenset({JobState.SCHEDULED, JobState.FAILED})


def key_scope(job: JobRecord) -> KeyScope | None:
    """The idempotency scope a job holds, or ``None`` when it holds none."""
    if job.idempotency_key is None or job.state not in ACTIVE_JOB_STATES:
        return None
    return (job.tenant_id, job.idempotency_key)


@dataclass
class Tables:
    """Rows plus the indexes the hot paths need, kept consistent by :meth:`put_job`."""

    jobs: dict[UUID, JobRecord] = field(default_factory=dict)
    seq: dict[UUID, int] = field(default_factory=dict)
    attempts: dict[UUID, dict[int, JobAttempt]] = field(default_factory=dict)
    logs: dict[UUID, tuple[JobLogLine, ...]] = field(default_factory=dict)
    recurring: dict[str, RecurringRecord] = field(default_factory=dict)
    instances: dict[UUID, WorkflowInstanceRecord] = field(default_factory=dict)
    bookmarks: dict[UUID, BookmarkRecord] = field(default_factory=dict)
    active_keys: dict[KeyScope, UUID] = field(default_factory=dict)
    ready: set[UUID] = field(default_factory=set)
    due: set[UUID] = field(default_factory=set)
    children: dict[UUID, set[UUID]] = field(default_factory=dict)
    paused: dict[str, bool] = field(default_factory=dict)
    limit_starts: dict[str, list[datetime]] = field(default_factory=dict)
    """Per rate-limited scope: its recent start times."""
    workers: dict[str, WorkerHeartbeat] = field(default_factory=dict)
    tag_targets: set[tuple[str, str]] = field(default_factory=set)
    """Every ``(tag, target)`` a stored job carried, kept once seen (the catalog's)."""
    last_seq: int = 0

    def put_job(self, old: JobRecord | None, new: JobRecord | None) -> None:
        """Replace ``old`` by ``new`` (either may be ``None``), updating every index."""
        if old is not None:
            self._unindex(old)
        if new is not None:
            self.jobs[new.id] = new
            self._index(new)
        elif old is not None:
            del self.jobs[old.id]

    def _unindex(self, job: JobRecord) -> None:
        scope = key_scope(job)
        if scope is not None and self.active_keys.get(scope) == job.id:
            del self.active_keys[scope]
        self.ready.discard(job.id)
        self.due.discard(job.id)
        if job.parent_id is not None:
            self.children.get(job.parent_id, set()).discard(job.id)

    def _index(self, job: JobRecord) -> None:
        scope = key_scope(job)
        if scope is not None:
            self.active_keys[scope] = job.id
        if job.state in _READY:
            self.ready.add(job.id)
        if job.state in _DUE:
            self.due.add(job.id)
        if job.parent_id is not None:
            self.children.setdefault(job.parent_id, set()).add(job.id)

    def awaiting_children(self, parent_id: UUID) -> Iterator[JobRecord]:
        for child_id in sorted(self.children.get(parent_id, ()), key=self.seq.__getitem__):
            child = self.jobs[child_id]
            if child.state is JobState.AWAITING:
                yield child


class UndoLog:
    """Records how to reverse every write of one call, so a failure rolls it all back."""

    def __init__(self, tables: Tables) -> None:
        self.tables = tables
        self._undo: list[Callable[[], None]] = []
        self.woken_queues: set[str] = set()

    def put_job(self, old: JobRecord | None, new: JobRecord | None) -> None:
        self.tables.put_job(old, new)
        self._undo.append(lambda: self.tables.put_job(new, old))
        if new is not None and new.state is JobState.ENQUEUED:
            self.woken_queues.add(new.queue)

    def insert_job(self, job: JobRecord) -> None:
        tables = self.tables
        tables.last_seq += 1
        tables.seq[job.id] = tables.last_seq
        self._undo.append(lambda: tables.seq.__delitem__(job.id))
        seen = {(tag, job.invocation.target) for tag in job.tags} - tables.tag_targets
        tables.tag_targets |= seen
        self._undo.append(lambda: tables.tag_targets.difference_update(seen))
        self.put_job(None, job)

    def delete_job(self, job: JobRecord) -> None:
        self.put_job(job, None)
        self.set(self.tables.attempts, job.id, None)
        self.set(self.tables.logs, job.id, None)
        seq = self.tables.seq.pop(job.id)
        self._undo.append(lambda: self.tables.seq.__setitem__(job.id, seq))

    def set[K, V](self, table: dict[K, V], key: K, value: V | None) -> None:
        """Set (or, with ``None``, delete) one row of a plain table."""
        missing = object()
        previous = table.get(key, missing)
        if value is None:
            table.pop(key, None)
        else:
            table[key] = value

        def undo() -> None:
            if previous is missing:
                table.pop(key, None)
            else:
                table[key] = previous  # type: ignore[assignment]

        self._undo.append(undo)

    def rollback(self) -> None:
        for undo in reversed(self._undo):
            undo()
        self._undo.clear()
        self.woken_queues.clear()
