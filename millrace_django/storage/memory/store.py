"""The job and workflow halves of the in-memory provider.

One lock serializes every call, and an undo log makes each call all-or-nothing. Wake-up
hints are published only after a call commits. Nothing here survives the process.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from datetime import datetime, timedelta
from uuid import UUID

from millrace_django.clock import Clock
from millrace_django.contract import (
    INSERTABLE_JOB_STATES,
    LOG_LINE_CAP,
    PRE_ACTIVE_JOB_STATES,
    TERMINAL_INSTANCE_STATES,
    TERMINAL_JOB_STATES,
    Admission,
    AttemptOutcome,
    BookmarkRecord,
    Capabilities,
    CheckpointReport,
    ClaimRequest,
    DuplicatePolicy,
    FireOutcome,
    InstanceState,
    JobAttempt,
    JobRecord,
    JobState,
    JobTransition,
    NewInstance,
    OverlapPolicy,
    ProgressReport,
    RecurringChange,
    RecurringRecord,
    ResumeJobs,
    WorkerHeartbeat,
    WorkflowInstanceRecord,
    attempt_after,
    expired_reason,
    oldest_kept_attempt,
    outcome_of,
    running_by_scope,
    transition_problem,
)
from millrace_django.contract.chains import predecessors, unapplied_predecessor
from millrace_django.contract.duplicates import refusal, replaced
from millrace_django.errors import (
    ConcurrencyConflict,
    DuplicateJobId,
    ParentJobNotFound,
    StorageError,
)
from millrace_django.storage.memory.notifier import MemoryNotifier
from millrace_django.storage.memory.tables import Tables, UndoLog, key_scope


def held(tables: Tables, record: RecurringRecord) -> bool:
    """Overlap ``queue`` holds ``record``'s due occurrence back: the job of its last fire
    is still active."""
    return record.overlap is OverlapPolicy.QUEUE and MemoryJobStore._previous_running(
        tables, record
    )


class MemoryJobStore:
    """The contract's job and workflow operations over :class:`Tables`."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self.tables = Tables()
        self.notifier = MemoryNotifier()
        self._lock = threading.RLock()

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities.NOTIFICATIONS

    @contextmanager
    def _atomic(self) -> Iterator[UndoLog]:
        with self._lock:
            log = UndoLog(self.tables)
            try:
                yield log
            except BaseException:
                log.rollback()
                raise
        self.notifier.publish(log.woken_queues)

    @contextmanager
    def _reading(self) -> Iterator[Tables]:
        with self._lock:
            yield self.tables

    # -- inserts -------------------------------------------------------------------------

    def _insert(self, log: UndoLog, job: JobRecord) -> UUID:
        """Insert with enqueue semantics: parent fix-up, then the key scope check."""
        tables = log.tables
        if job.id in tables.jobs:
            raise DuplicateJobId(job.id)
        if job.state not in INSERTABLE_JOB_STATES:
            raise StorageError(f"a new job cannot be stored as {job.state.value!r}")
        if job.state is JobState.AWAITING:
            job = self._fix_up_continuation(tables, job)
        scope = key_scope(job)
        if scope is not None and scope in tables.active_keys:
            holder = tables.jobs[tables.active_keys[scope]]
            if job.on_duplicate is not DuplicatePolicy.RETURN:
                self._meet_holder(log, job, holder)
            return holder.id
        log.insert_job(job)
        return job.id

    @staticmethod
    def _meet_holder(log: UndoLog, job: JobRecord, holder: JobRecord) -> None:
        """Apply ``job``'s duplicate policy to the active ``holder`` of its key."""
        refused = refusal(job, holder.id, holder.state)
        if refused is not None:
            raise refused
        log.put_job(holder, replaced(holder, job))

    def _fix_up_continuation(self, tables: Tables, job: JobRecord) -> JobRecord:
        parent = tables.jobs.get(job.parent_id) if job.parent_id is not None else None
        if parent is None or job.parent_id is None:
            raise ParentJobNotFound(job.parent_id or UUID(int=0))
        if parent.state is JobState.SUCCEEDED:
            return replace(job, state=JobState.ENQUEUED)
        if parent.state in (JobState.DEAD, JobState.CANCELLED):
            return replace(job, state=JobState.CANCELLED, finished_at=self.clock.now())
        return job

    def enqueue(self, jobs: Sequence[JobRecord]) -> list[UUID]:
        if not jobs:
            return []
        with self._atomic() as log:
            return [self._insert(log, job) for job in jobs]

    # -- claims and leases ---------------------------------------------------------------

    def claim(self, request: ClaimRequest) -> list[JobRecord]:
        if request.max_count <= 0:
            return []
        with self._atomic() as log:
            now = self.clock.now()
            tables = log.tables
            candidates = [
                job
                for job in map(tables.jobs.__getitem__, tables.ready)
                if job.queue in request.queues
                and job.queue not in tables.paused
                and (
                    (
                        job.state is JobState.ENQUEUED
                        and (job.expires_at is None or job.expires_at > now)
                    )
                    or (job.lease_until is not None and job.lease_until <= now)
                )
            ]
            candidates.sort(key=lambda job: (-job.priority, tables.seq[job.id]))
            claimed: list[JobRecord] = []
            admission: Admission | None = None
            for job in candidates:
                if len(claimed) == request.max_count:
                    break
                if job.limits:
                    admission = admission or self._admission(tables, now)
                    if not admission.admit(job.limits, holds_slot=job.state is JobState.PROCESSING):
                        continue
                if job.state is JobState.PROCESSING:
                    self._record_attempt(log, job, AttemptOutcome.INTERRUPTED, error=None, at=now)
                leased = replace(
                    job,
                    state=JobState.PROCESSING,
                    worker_id=request.worker_id,
                    lease_until=now + request.lease,
                    attempt=job.attempt + 1,
                    started_at=now,
                )
                log.put_job(job, leased)
                claimed.append(leased)
            if admission is not None:
                for scope, starts in admission.recorded_starts().items():
                    log.set(tables.limit_starts, scope, starts)
            return claimed

    @staticmethod
    def _admission(tables: Tables, now: datetime) -> Admission:
        """The limits' state as the claim finds it: the scopes of the limited jobs
        running (those in the ready index that are ``processing``), their recent starts."""
        running = (tables.jobs[job_id] for job_id in tables.ready)
        return Admission(
            running_by_scope(
                job.limits for job in running if job.limits and job.state is JobState.PROCESSING
            ),
            tables.limit_starts,
            now,
        )

    def _record_attempt(
        self,
        log: UndoLog,
        job: JobRecord,
        outcome: AttemptOutcome,
        *,
        error: str | None,
        at: datetime,
    ) -> None:
        history = dict(log.tables.attempts.get(job.id, {}))
        history.setdefault(
            job.attempt,
            JobAttempt(
                attempt=job.attempt,
                outcome=outcome,
                recorded_at=at,
                worker_id=job.worker_id,
                error=error,
            ),
        )
        floor = oldest_kept_attempt(job.attempt)
        log.set(
            log.tables.attempts,
            job.id,
            {number: row for number, row in history.items() if number >= floor},
        )

    def renew_leases(self, worker_id: str, ids: Collection[UUID], lease: timedelta) -> set[UUID]:
        with self._atomic() as log:
            until = self.clock.now() + lease
            renewed: set[UUID] = set()
            for job_id in ids:
                job = log.tables.jobs.get(job_id)
                if job is None or job.state is not JobState.PROCESSING:
                    continue
                if job.worker_id != worker_id:
                    continue
                log.put_job(job, replace(job, lease_until=until))
                if not job.cancel_requested:
                    renewed.add(job_id)
            return renewed

    # -- transitions ---------------------------------------------------------------------

    def apply(self, transition: JobTransition) -> bool:
        with self._atomic() as log:
            return self._apply(log, transition)

    def apply_many(self, transitions: Sequence[JobTransition]) -> list[bool | StorageError]:
        outcomes: list[bool | StorageError] = []
        after = predecessors(transitions)
        for position, transition in enumerate(transitions):
            before = after.get(position)
            if before is not None and outcomes[before] is not True:
                outcomes.append(unapplied_predecessor(transition))
                continue
            try:
                outcomes.append(self.apply(transition))
            except StorageError as error:
                outcomes.append(error)
        return outcomes

    def _apply(self, log: UndoLog, t: JobTransition) -> bool:
        tables = log.tables
        job = tables.jobs.get(t.job_id)
        fenced = (
            job is not None
            and job.state is JobState.PROCESSING
            and job.worker_id == t.expected_worker_id
            and job.attempt == t.expected_attempt
        )
        if not fenced or job is None:
            return False
        problem = transition_problem(t)
        if problem is not None:
            raise StorageError(problem)
        now = self.clock.now()
        outcome = outcome_of(t, job.failures)
        if outcome is not None:
            error = t.error if outcome is AttemptOutcome.FAILED else None
            self._record_attempt(log, job, outcome, error=error, at=now)
        log.put_job(job, self._moved(job, t, now))
        if t.checkpoint is not None:
            self._checkpoint(log, t.checkpoint.instance, t.checkpoint.expected_revision)
        for bookmark in t.bookmarks:
            self._insert_bookmark(log, bookmark)
        for follower in t.enqueue:
            self._insert(log, follower)
        if t.activate_continuations:
            for child in list(tables.awaiting_children(job.id)):
                log.put_job(child, replace(child, state=JobState.ENQUEUED, due_at=None))
        if t.cancel_continuations:
            self._cancel_awaiting_closure(log, job.id, now)
        return True

    @staticmethod
    def _moved(job: JobRecord, t: JobTransition, now: datetime) -> JobRecord:
        """The job row after ``t``: the target state and the fields it implies."""
        cleared = replace(
            job,
            state=t.target,
            worker_id=None,
            lease_until=None,
            failures=t.failures,
            last_error=t.error if t.error is not None else job.last_error,
        )
        if t.target is JobState.FAILED:
            if t.due_at is None:
                raise StorageError("a failed transition needs the retry's due_at")
            return replace(cleared, due_at=t.due_at)
        if t.target is JobState.ENQUEUED:
            return replace(cleared, due_at=None, attempt=attempt_after(t))
        result = t.result if t.target is JobState.SUCCEEDED else None
        return replace(cleared, finished_at=t.finished_at or now, result=result)

    def _cancel_awaiting_closure(self, log: UndoLog, parent_id: UUID, now: datetime) -> None:
        pending = [parent_id]
        while pending:
            for child in list(log.tables.awaiting_children(pending.pop())):
                log.put_job(child, replace(child, state=JobState.CANCELLED, finished_at=now))
                pending.append(child.id)

    def report_progress(self, report: ProgressReport) -> bool:
        with self._atomic() as log:
            job = log.tables.jobs.get(report.job_id)
            fenced = (
                job is not None
                and job.state is JobState.PROCESSING
                and job.worker_id == report.worker_id
                and job.attempt == report.attempt
            )
            if not fenced or job is None:
                return False
            if report.progress is not None:
                log.put_job(job, replace(job, progress=report.progress))
            if report.logs:
                lines = log.tables.logs.get(job.id, ()) + tuple(report.logs)
                log.set(log.tables.logs, job.id, lines[-LOG_LINE_CAP:])
            return True

    def save_checkpoint(self, report: CheckpointReport) -> bool:
        with self._atomic() as log:
            job = log.tables.jobs.get(report.job_id)
            if (
                job is None
                or job.state is not JobState.PROCESSING
                or job.worker_id != report.worker_id
                or job.attempt != report.attempt
            ):
                return False
            log.put_job(job, replace(job, checkpoint=report.data))
            return True

    # -- operator moves ------------------------------------------------------------------

    def try_cancel(self, job_id: UUID) -> bool:
        with self._atomic() as log:
            job = log.tables.jobs.get(job_id)
            if job is None or job.state in TERMINAL_JOB_STATES:
                return False
            if job.state is JobState.PROCESSING:
                log.put_job(job, replace(job, cancel_requested=True))
                return True
            assert job.state in PRE_ACTIVE_JOB_STATES
            now = self.clock.now()
            log.put_job(job, replace(job, state=JobState.CANCELLED, finished_at=now))
            self._cancel_awaiting_closure(log, job.id, now)
            return True

    def expire_due(self, now: datetime, limit: int) -> int:
        with self._atomic() as log:
            tables = log.tables
            expired = sorted(
                (job.expires_at, tables.seq[job.id], job)
                for job in tables.jobs.values()
                if job.state in PRE_ACTIVE_JOB_STATES
                and job.expires_at is not None
                and job.expires_at <= now
            )[: max(limit, 0)]
            for deadline, _, job in expired:
                ended = replace(
                    job,
                    state=JobState.CANCELLED,
                    finished_at=now,
                    last_error=expired_reason(deadline),
                )
                log.put_job(job, ended)
                self._cancel_awaiting_closure(log, job.id, now)
            return len(expired)

    def try_run_now(self, job_id: UUID) -> bool:
        with self._atomic() as log:
            job = log.tables.jobs.get(job_id)
            if job is None or job.state not in (JobState.SCHEDULED, JobState.FAILED):
                return False
            log.put_job(job, replace(job, state=JobState.ENQUEUED, due_at=None))
            return True

    def get_job(self, job_id: UUID) -> JobRecord | None:
        with self._reading() as tables:
            return tables.jobs.get(job_id)

    def activate_due(self, now: datetime, limit: int) -> int:
        with self._atomic() as log:
            tables = log.tables
            due = [
                job
                for job in map(tables.jobs.__getitem__, tables.due)
                if job.due_at is not None and job.due_at <= now
            ]
            due.sort(key=lambda job: (job.due_at, tables.seq[job.id]))
            for job in due[: max(limit, 0)]:
                log.put_job(job, replace(job, state=JobState.ENQUEUED, due_at=None))
            return min(len(due), max(limit, 0))

    def forget_idle_limits(self, before: datetime, limit: int) -> int:
        """Memory keeps state for rate-limited scopes only: their recent starts."""
        with self._atomic() as log:
            starts = log.tables.limit_starts
            idle = sorted((max(times), scope) for scope, times in starts.items() if times)
            idle = [(at, scope) for at, scope in idle if at < before][: max(limit, 0)]
            for _, scope in idle:
                log.set(starts, scope, None)
            return len(idle)

    def purge_finished(self, before: datetime, limit: int) -> int:
        with self._atomic() as log:
            tables = log.tables
            finished = [
                job
                for job in tables.jobs.values()
                if job.state in TERMINAL_JOB_STATES
                and job.finished_at is not None
                and job.finished_at < before
            ]
            finished.sort(key=lambda job: (job.finished_at, tables.seq[job.id]))
            for job in finished[: max(limit, 0)]:
                log.delete_job(job)
            return min(len(finished), max(limit, 0))

    def delete_job(self, job_id: UUID) -> bool:
        with self._atomic() as log:
            job = log.tables.jobs.get(job_id)
            if job is None or job.state not in TERMINAL_JOB_STATES:
                return False
            log.delete_job(job)
            return True

    # -- paused queues and the worker registry -------------------------------------------

    def pause_queue(self, queue: str) -> None:
        with self._atomic() as log:
            log.set(log.tables.paused, queue, True)

    def resume_queue(self, queue: str) -> None:
        with self._atomic() as log:
            log.set(log.tables.paused, queue, None)
            if any(
                job.queue == queue and job.state is JobState.ENQUEUED
                for job in map(log.tables.jobs.__getitem__, log.tables.ready)
            ):
                log.woken_queues.add(queue)

    def paused_queues(self) -> set[str]:
        with self._reading() as tables:
            return set(tables.paused)

    def record_worker_heartbeat(self, heartbeat: WorkerHeartbeat) -> None:
        with self._atomic() as log:
            log.set(log.tables.workers, heartbeat.worker_id, heartbeat)

    def list_workers(self) -> list[WorkerHeartbeat]:
        with self._reading() as tables:
            rows = list(tables.workers.values())
        rows.sort(key=lambda w: w.worker_id)
        rows.sort(key=lambda w: w.seen_at, reverse=True)
        return rows

    def forget_workers(self, seen_before: datetime) -> int:
        with self._atomic() as log:
            gone = [w for w in log.tables.workers.values() if w.seen_at < seen_before]
            for worker in gone:
                log.set(log.tables.workers, worker.worker_id, None)
            return len(gone)

    # -- recurring -----------------------------------------------------------------------

    def upsert_recurring(self, record: RecurringRecord) -> None:
        with self._atomic() as log:
            stored = log.tables.recurring.get(record.id)
            if stored is not None:
                same_schedule = (stored.cron, stored.timezone) == (record.cron, record.timezone)
                record = replace(
                    record,
                    next_fire_time=stored.next_fire_time
                    if same_schedule
                    else record.next_fire_time,
                    last_fire_time=stored.last_fire_time,
                    fired_job_id=stored.fired_job_id,
                    last_skip_time=stored.last_skip_time,
                    enabled=stored.enabled,
                    created_at=stored.created_at,
                )
            log.set(log.tables.recurring, record.id, record)

    def edit_recurring(self, recurring_id: str, change: RecurringChange) -> bool:
        with self._atomic() as log:
            stored = log.tables.recurring.get(recurring_id)
            if stored is None:
                return False
            same_schedule = (stored.cron, stored.timezone) == (change.cron, change.timezone)
            edited = replace(
                stored,
                cron=change.cron,
                timezone=change.timezone,
                invocation=change.invocation,
                next_fire_time=stored.next_fire_time if same_schedule else change.next_fire_time,
                updated_at=self.clock.now(),
            )
            log.set(log.tables.recurring, recurring_id, edited)
            return True

    def get_recurring(self, recurring_id: str) -> RecurringRecord | None:
        with self._reading() as tables:
            return tables.recurring.get(recurring_id)

    def remove_recurring(self, recurring_id: str) -> bool:
        with self._atomic() as log:
            existed = recurring_id in log.tables.recurring
            log.set(log.tables.recurring, recurring_id, None)
            return existed

    def disable_recurring(self, recurring_id: str) -> bool:
        with self._atomic() as log:
            stored = log.tables.recurring.get(recurring_id)
            if stored is None:
                return False
            disabled = replace(stored, enabled=False, updated_at=self.clock.now())
            log.set(log.tables.recurring, recurring_id, disabled)
            return True

    def enable_recurring(self, recurring_id: str, next_fire_time: datetime) -> bool:
        with self._atomic() as log:
            stored = log.tables.recurring.get(recurring_id)
            if stored is None:
                return False
            if not stored.enabled:
                enabled = replace(
                    stored, enabled=True, next_fire_time=next_fire_time, updated_at=self.clock.now()
                )
                log.set(log.tables.recurring, recurring_id, enabled)
            return True

    def get_due_recurring(self, now: datetime, limit: int) -> list[RecurringRecord]:
        with self._reading() as tables:
            due = [
                r
                for r in tables.recurring.values()
                if r.enabled and r.next_fire_time <= now and not held(tables, r)
            ]
            due.sort(key=lambda r: (r.next_fire_time, r.id))
            return due[: max(limit, 0)]

    def next_due_time(self, after: datetime) -> datetime | None:
        with self._reading() as tables:
            due_jobs = (tables.jobs[job_id].due_at for job_id in tables.due)
            fire_times = (r.next_fire_time for r in tables.recurring.values() if r.enabled)
            later = [t for t in (*due_jobs, *fire_times) if t is not None and t > after]
            return min(later, default=None)

    def try_fire_recurring(
        self, recurring_id: str, expected: datetime, next_fire_time: datetime, job: JobRecord
    ) -> FireOutcome:
        with self._atomic() as log:
            stored = log.tables.recurring.get(recurring_id)
            if stored is None or not stored.enabled or stored.next_fire_time != expected:
                return FireOutcome.LOST
            now = self.clock.now()
            if stored.overlap is not OverlapPolicy.ALLOW and self._previous_running(
                log.tables, stored
            ):
                if stored.overlap is OverlapPolicy.QUEUE:
                    return FireOutcome.HELD
                skipped = replace(
                    stored, next_fire_time=next_fire_time, last_skip_time=expected, updated_at=now
                )
                log.set(log.tables.recurring, recurring_id, skipped)
                return FireOutcome.SKIPPED
            fired = replace(
                stored,
                next_fire_time=next_fire_time,
                last_fire_time=expected,
                fired_job_id=job.id,
                updated_at=now,
            )
            log.set(log.tables.recurring, recurring_id, fired)
            self._insert(log, job)
            return FireOutcome.FIRED

    @staticmethod
    def _previous_running(tables: Tables, record: RecurringRecord) -> bool:
        """The job ``record`` fired last is still active (what its overlap policy sees)."""
        previous = tables.jobs.get(record.fired_job_id) if record.fired_job_id else None
        return previous is not None and previous.state not in TERMINAL_JOB_STATES

    # -- workflows -----------------------------------------------------------------------

    def create_instance(
        self,
        instance: WorkflowInstanceRecord,
        enqueue: Sequence[JobRecord] = (),
        bookmarks: Sequence[BookmarkRecord] = (),
    ) -> None:
        self.create_instances(
            [NewInstance(instance=instance, enqueue=tuple(enqueue), bookmarks=tuple(bookmarks))]
        )

    def create_instances(self, starts: Sequence[NewInstance]) -> None:
        with self._atomic() as log:
            for start in starts:
                instance = start.instance
                if instance.id in log.tables.instances:
                    raise ConcurrencyConflict(f"workflow instance {instance.id} already exists")
                log.set(log.tables.instances, instance.id, replace(instance, revision=1))
                for job in start.enqueue:
                    self._insert(log, job)
                for bookmark in start.bookmarks:
                    self._insert_bookmark(log, bookmark)

    def get_instance(self, instance_id: UUID) -> WorkflowInstanceRecord | None:
        with self._reading() as tables:
            return tables.instances.get(instance_id)

    def get_instances(self, instance_ids: Collection[UUID]) -> dict[UUID, WorkflowInstanceRecord]:
        with self._reading() as tables:
            stored = tables.instances
            return {i: stored[i] for i in instance_ids if i in stored}

    def update_instance(self, instance: WorkflowInstanceRecord, expected_revision: int) -> None:
        with self._atomic() as log:
            self._checkpoint(log, instance, expected_revision)

    def _checkpoint(
        self, log: UndoLog, instance: WorkflowInstanceRecord, expected_revision: int
    ) -> None:
        stored = log.tables.instances.get(instance.id)
        if stored is None or stored.revision != expected_revision:
            raise ConcurrencyConflict(
                f"workflow instance {instance.id} is not at revision {expected_revision}"
            )
        log.set(
            log.tables.instances, instance.id, replace(instance, revision=expected_revision + 1)
        )

    def add_bookmark(self, bookmark: BookmarkRecord) -> None:
        with self._atomic() as log:
            self._insert_bookmark(log, bookmark)

    def _insert_bookmark(self, log: UndoLog, bookmark: BookmarkRecord) -> None:
        if bookmark.id in log.tables.bookmarks:
            raise StorageError(f"bookmark {bookmark.id} already exists")
        log.set(log.tables.bookmarks, bookmark.id, bookmark)

    def consume_bookmark(
        self,
        signal_name: str,
        correlation_id: str,
        enqueue: Callable[[BookmarkRecord], Sequence[JobRecord]] | None = None,
    ) -> BookmarkRecord | None:
        with self._atomic() as log:
            matches = [
                b
                for b in log.tables.bookmarks.values()
                if b.signal_name == signal_name and b.correlation_id == correlation_id
            ]
            if not matches:
                return None
            oldest = min(matches, key=lambda b: (b.created_at, b.id.bytes))
            log.set(log.tables.bookmarks, oldest.id, None)
            for job in enqueue(oldest) if enqueue is not None else ():
                self._insert(log, job)
            return oldest

    def consume_bookmarks(
        self,
        wanted: Sequence[tuple[str, str]],
        enqueue: ResumeJobs | None = None,
    ) -> list[BookmarkRecord | None]:
        with self._atomic() as log:
            keys = set(wanted)
            waiting: dict[tuple[str, str], list[BookmarkRecord]] = {}
            for b in log.tables.bookmarks.values():
                if (b.signal_name, b.correlation_id) in keys:
                    waiting.setdefault((b.signal_name, b.correlation_id), []).append(b)
            for matches in waiting.values():
                matches.sort(key=lambda b: (b.created_at, b.id.bytes), reverse=True)
            consumed = [waiting[key].pop() if waiting.get(key) else None for key in wanted]
            for bookmark in consumed:
                if bookmark is not None:
                    log.set(log.tables.bookmarks, bookmark.id, None)
            if enqueue is not None:
                stored = log.tables.instances
                ids = {b.instance_id for b in consumed if b is not None}
                instances = {i: stored[i] for i in ids if i in stored}
                for job in enqueue(consumed, instances):
                    self._insert(log, job)
            return consumed

    def consume_bookmark_by_id(
        self,
        bookmark_id: UUID,
        enqueue: Callable[[BookmarkRecord], Sequence[JobRecord]] | None = None,
    ) -> BookmarkRecord | None:
        with self._atomic() as log:
            bookmark = log.tables.bookmarks.get(bookmark_id)
            if bookmark is None:
                return None
            log.set(log.tables.bookmarks, bookmark.id, None)
            for job in enqueue(bookmark) if enqueue is not None else ():
                self._insert(log, job)
            return bookmark

    def cancel_instance(self, instance_id: UUID) -> bool:
        with self._atomic() as log:
            tables = log.tables
            stored = tables.instances.get(instance_id)
            if stored is None or stored.state in TERMINAL_INSTANCE_STATES:
                return False
            now = self.clock.now()
            cancelled = replace(
                stored,
                state=InstanceState.CANCELLED,
                revision=stored.revision + 1,
                updated_at=now,
            )
            log.set(tables.instances, instance_id, cancelled)
            for bookmark in [b for b in tables.bookmarks.values() if b.instance_id == instance_id]:
                log.set(tables.bookmarks, bookmark.id, None)
            owned = [
                job
                for job in tables.jobs.values()
                if job.workflow_instance_id == instance_id and job.state not in TERMINAL_JOB_STATES
            ]
            owned.sort(key=lambda job: tables.seq[job.id])
            for job in owned:
                current = tables.jobs[job.id]  # an earlier closure may have cancelled it
                if current.state is JobState.PROCESSING:
                    log.put_job(current, replace(current, cancel_requested=True))
                elif current.state in PRE_ACTIVE_JOB_STATES:
                    log.put_job(
                        current, replace(current, state=JobState.CANCELLED, finished_at=now)
                    )
                    self._cancel_awaiting_closure(log, current.id, now)
            return True
