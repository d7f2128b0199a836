"""The storage contract: what a provider must do, atomically, for the engine above it.

Providers implement mechanics only. The engine decides *what* happens (retry math, cron,
continuations, workflow routing) and hands a provider records and transitions to apply
all-or-nothing. Every "now" a provider needs comes from the :class:`~millrace_django.clock.Clock`
it was built with; a provider never reads database time or the wall clock to decide
anything (it may offer the database's time for calibration alone, see
:class:`~millrace_django.clock.DatabaseTime`).

Race losses are return values (``False``, ``None``, an omitted id); exceptions are for
contract violations (:class:`~millrace_django.errors.StorageError` and its subclasses).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from datetime import datetime, timedelta
from enum import Flag, auto
from typing import Protocol, runtime_checkable
from uuid import UUID

from millrace_django.contract.catalog import CatalogEntry
from millrace_django.contract.limits import LimitUsage
from millrace_django.contract.monitoring import (
    InstanceQuery,
    InstanceSummary,
    JobDetails,
    JobQuery,
    JobStatistics,
    JobSummary,
    Page,
    RecurringQuery,
    RecurringSummary,
    TenantFilter,
    ThroughputPoint,
)
from millrace_django.contract.records import (
    BookmarkRecord,
    CheckpointReport,
    ClaimRequest,
    FireOutcome,
    JobRecord,
    JobTransition,
    NewInstance,
    ProgressReport,
    RecurringChange,
    RecurringRecord,
    ResumeJobs,
    WorkerHeartbeat,
    WorkflowInstanceRecord,
)
from millrace_django.errors import StorageError


class Capabilities(Flag):
    """What a provider offers beyond the contract; read once, stable for its lifetime."""

    NONE = 0
    NOTIFICATIONS = auto()
    """The provider also implements :class:`Notifier`."""


@runtime_checkable
class JobStorage(Protocol):
    """The durable job substrate."""

    @property
    def capabilities(self) -> Capabilities: ...

    def enqueue(self, jobs: Sequence[JobRecord]) -> list[UUID]:
        """Insert ``jobs`` all-or-nothing and return the effective ids positionally.

        - A job whose ``(tenant_id, idempotency_key)`` scope is held by an *active* job
          (any non-terminal state; a null tenant is one shared scope) is not inserted; its
          position returns the holder's id. This linearizes with a concurrent terminal
          release: each position is either the old holder's id or the new job's id.
          That is the job's ``on_duplicate`` policy ``RETURN``; with ``REJECT`` a held key
          raises :class:`~millrace_django.errors.IdempotencyKeyHeld` (carrying the
          holder's id), nothing stored; with ``REPLACE`` a ``scheduled``, ``enqueued`` or
          ``failed`` holder takes the new job's invocation, limits, state, ``due_at`` and
          ``expires_at`` (keeping its id, queue, options, counters and history) and its
          position returns its id, while any other holder (``processing``, ``awaiting``)
          raises :class:`~millrace_django.errors.IdempotencyKeyHeld`, nothing stored.
        - An ``awaiting`` job is fixed up against its parent in the same atom, serialized
          with the parent's terminal transition: parent succeeded -> stored ``enqueued``;
          parent dead or cancelled -> stored ``cancelled`` with ``finished_at``; parent
          missing -> :class:`~millrace_django.errors.ParentJobNotFound`, nothing stored.
        - A duplicate job id raises :class:`~millrace_django.errors.DuplicateJobId`,
          nothing stored.
        - Callers only insert ``scheduled``, ``enqueued`` or ``awaiting`` jobs and never
          repeat a non-null key within one batch. An empty batch is a no-op.
        """
        ...

    def claim(self, request: ClaimRequest) -> list[JobRecord]:
        """Lease up to ``max_count`` claimable jobs of the requested queues, exclusively.

        Claimable: ``enqueued``, or ``processing`` with ``lease_until <= now``. Never
        ``scheduled``, ``failed`` or ``awaiting``, whatever their due time. A claimed job
        becomes ``processing`` with ``worker_id``, ``lease_until = now + lease`` and
        ``attempt + 1``. Order: priority descending, then insertion order, across the
        union of queues. Reclaiming an expired lease records an ``interrupted`` attempt
        for the previous attempt, in the same atom. Returning fewer jobs is conformant.
        A paused queue (see :meth:`pause_queue`) is skipped: none of its jobs is claimed,
        enqueued or under an expired lease. An ``enqueued`` job past its deadline
        (``expires_at <= now``) is never claimed (:meth:`expire_due` ends it); an expired
        lease is reclaimed whatever the deadline (that execution had started).

        A job that carries ``limits`` is claimed only as
        :class:`~millrace_django.contract.Admission` allows, decided in the claim's own
        atom after every claim of the scopes concerned that could start a job has been
        serialized with this one: never more of a scope ``processing`` than its
        ``concurrency``, never more starts of it in any window of its ``rate.period``
        than ``rate.count``, across every claimer. The starts are recorded in the same
        atom, stamped with the storage's clock. Jobs held back by a limit never stop the
        claim from taking other claimable jobs, those without limits above all.
        """
        ...

    def renew_leases(self, worker_id: str, ids: Collection[UUID], lease: timedelta) -> set[UUID]:
        """Set ``lease_until = now + lease`` on each job still ``processing`` under
        ``worker_id`` (an expired but unreclaimed lease is revived), atomically per job
        against claims. Returns the renewed ids *minus* those with ``cancel_requested``:
        an omitted id means "cancel requested or lost", and the worker checks which."""
        ...

    def apply(self, transition: JobTransition) -> bool:
        """Apply a worker's fenced transition with all its side effects, all-or-nothing.

        The fence ``(state = processing, worker_id, attempt)`` is checked first; a failed
        fence returns ``False`` and changes nothing. Then, in one atom: the target state
        and its fields (terminal: ``finished_at``, worker and lease cleared, key scope
        released but the key kept, ``last_error`` kept unless a new error is given;
        ``succeeded`` stores ``result``; ``failed``: ``due_at``, ``last_error``,
        ``failures``; ``enqueued`` (a release): worker, lease and ``due_at`` cleared, and
        for an attempt that never started (``unstarted``) the attempt given back), the
        attempt-history row (:func:`~millrace_django.contract.outcome_of`), the
        checkpoint, bookmarks, inserts (with :meth:`enqueue` semantics, a held key
        skipped silently, and this transition's own key release already visible),
        activation of direct ``awaiting`` children, cancellation of the transitive
        ``awaiting`` closure. A stale or missing checkpoint revision raises
        :class:`~millrace_django.errors.ConcurrencyConflict` and rolls everything back;
        a transition :func:`~millrace_django.contract.transition_problem` refuses raises
        :class:`~millrace_django.errors.StorageError`, nothing changed.
        """
        ...

    def apply_many(self, transitions: Sequence[JobTransition]) -> list[bool | StorageError]:
        """Apply several transitions together (one round trip where the store allows it).

        Each position is fenced and all-or-nothing on its own, exactly as :meth:`apply`,
        and reports its own outcome: ``True``, ``False`` for a failed fence, or the
        :class:`~millrace_django.errors.StorageError` that :meth:`apply` would have raised
        (that transition changed nothing; the others are unaffected). Nothing raises for
        one position's sake. One exception: a transition whose checkpoint expects the
        revision an earlier one's checkpoint in the call leaves (a sibling step planned
        onto it, see :mod:`~millrace_django.contract.chains`) is applied only if that
        one was, and otherwise answers
        :class:`~millrace_django.errors.ConcurrencyConflict`, changing nothing."""
        ...

    def report_progress(self, report: ProgressReport) -> bool:
        """Store a running job's progress and append its log lines, fenced like
        :meth:`apply` on ``(processing, worker_id, attempt)``; a failed fence stores
        nothing and returns ``False``. Only the newest ``LOG_LINE_CAP`` lines are kept.
        Progress and logs outlive the run (they are history for the dashboard) and go
        with the job when it is purged."""
        ...

    def save_checkpoint(self, report: CheckpointReport) -> bool:
        """Replace a running job's checkpoint with ``report.data``, fenced like
        :meth:`apply` on ``(processing, worker_id, attempt)``; a failed fence stores
        nothing and returns ``False`` (a worker fenced off never overwrites a newer
        owner's checkpoint). The checkpoint is kept through failures, retries,
        interruptions and success (it is history for the dashboard), read back by
        :meth:`get_job`, every later :meth:`claim` of the job and the job's details, and
        goes with the job when it is purged."""
        ...

    def try_cancel(self, job_id: UUID) -> bool:
        """Cancel atomically. Pre-active (``scheduled``, ``enqueued``, ``failed``,
        ``awaiting``): ``cancelled`` with ``finished_at``, key released, the transitive
        ``awaiting`` closure cancelled too; ``True``. ``processing``: only sets
        ``cancel_requested`` (which never blocks the worker's fence); ``True``. Terminal
        or unknown: ``False``, nothing changes."""
        ...

    def try_run_now(self, job_id: UUID) -> bool:
        """Move a job that waits for its due time, ``scheduled`` (delayed) or ``failed``
        (awaiting its retry), to ``enqueued`` now, in one atom: ``due_at`` cleared,
        counters, error and deadline untouched. At most one of several concurrent calls
        (or a concurrent :meth:`activate_due`) moves it. Anything else (``awaiting``,
        already ``enqueued``, started, finished, unknown): ``False``, nothing changes."""
        ...

    def get_job(self, job_id: UUID) -> JobRecord | None:
        """An unfenced snapshot of one job."""
        ...

    def activate_due(self, now: datetime, limit: int) -> int:
        """Move up to ``limit`` ``scheduled``/``failed`` jobs with ``due_at <= now`` to
        ``enqueued`` (``due_at`` cleared), oldest due first, ties by insertion order.
        Safe on every node at once: each job is activated exactly once."""
        ...

    def expire_due(self, now: datetime, limit: int) -> int:
        """Cancel up to ``limit`` pre-active jobs (``scheduled``, ``enqueued``, ``failed``,
        ``awaiting``) whose deadline has passed (``expires_at <= now``), soonest deadline
        first, exactly as :meth:`try_cancel` would (``finished_at = now``, key released,
        the transitive ``awaiting`` closure cancelled), with ``last_error`` set to
        :func:`~millrace_django.contract.expired_reason`. Never touches a ``processing``
        or terminal job. Safe on every node at once; returns how many this call ended."""
        ...

    def forget_idle_limits(self, before: datetime, limit: int) -> int:
        """Forget up to ``limit`` limit scopes whose latest start (or, never started,
        first claim) came before ``before``, oldest first; returns how many. Called with
        ``before <= now - MAX_RATE_PERIOD``, a forgotten scope had no start in any rate's
        window, so the next claim of its jobs starts it afresh losing nothing; a scope a
        claim is deciding on at that moment is kept (or that claim replays)."""
        ...

    def purge_finished(self, before: datetime, limit: int) -> int:
        """Delete up to ``limit`` terminal jobs finished before ``before`` (and their
        attempt history), oldest first. Never touches an active job. Returns the count."""
        ...

    def delete_job(self, job_id: UUID) -> bool:
        """Delete one terminal job (and its attempt history, progress and logs) in one
        atom. An active job or an unknown id: ``False``, nothing changes."""
        ...

    def pause_queue(self, queue: str) -> None:
        """Mark ``queue`` paused: from the next :meth:`claim` on, none of its jobs is
        claimed, whatever their state. Idempotent. Jobs already ``processing`` are not
        touched (they finish, fail or are released as usual); enqueueing into a paused
        queue still works. The mark is durable and shared by every worker."""
        ...

    def resume_queue(self, queue: str) -> None:
        """Lift the pause of ``queue`` (a no-op if it is not paused); its claimable jobs
        are claimable again from the next :meth:`claim` on."""
        ...

    def paused_queues(self) -> set[str]:
        """The queues paused now."""
        ...

    def record_worker_heartbeat(self, heartbeat: WorkerHeartbeat) -> None:
        """Insert or replace the registry row of ``heartbeat.worker_id`` with every
        field of ``heartbeat``. The registry is informational: nothing in the contract
        reads it to decide ownership (an absent worker's jobs come back by their
        leases)."""
        ...

    def list_workers(self) -> list[WorkerHeartbeat]:
        """Every registry row, most recently seen first (ties by ``worker_id``)."""
        ...

    def forget_workers(self, seen_before: datetime) -> int:
        """Delete the rows with ``seen_at < seen_before``; how many were deleted."""
        ...

    def upsert_recurring(self, record: RecurringRecord) -> None:
        """Insert, or update in one atom: cron, time zone, queue, invocation, retry,
        priority, tenant, overlap policy and ``updated_at`` are overwritten;
        ``next_fire_time`` is taken from ``record`` only if the schedule (cron or time
        zone) changed; ``last_fire_time``, ``fired_job_id``, ``last_skip_time``,
        ``enabled`` and ``created_at`` are always kept (``enabled`` is taken from
        ``record`` on insert only)."""
        ...

    def edit_recurring(self, recurring_id: str, change: RecurringChange) -> bool:
        """An operator's edit of a stored definition, in one atom: ``change``'s cron, time
        zone and invocation and ``updated_at = now`` written; its ``next_fire_time`` taken
        only if the schedule (cron or time zone) changed; every other field kept. An
        unknown id: ``False``, nothing stored (an edit never creates a definition)."""
        ...

    def get_recurring(self, recurring_id: str) -> RecurringRecord | None: ...

    def remove_recurring(self, recurring_id: str) -> bool:
        """Delete the definition only (fired jobs keep ``recurring_id``). Whether it
        existed."""
        ...

    def disable_recurring(self, recurring_id: str) -> bool:
        """Mark the definition disabled (``enabled = False``, ``updated_at = now``), in
        one atom: from then on every :meth:`try_fire_recurring` of it is ``LOST``, even
        one whose caller read it due before, and :meth:`get_due_recurring`,
        :meth:`next_due_time` and the overdue count leave it out. Everything else is
        kept. Idempotent; whether the definition exists."""
        ...

    def enable_recurring(self, recurring_id: str, next_fire_time: datetime) -> bool:
        """Let a disabled definition fire again, in one atom: ``enabled = True``,
        ``next_fire_time`` set (the engine passes the first occurrence after now, so
        occurrences missed while disabled are dropped, never caught up) and
        ``updated_at = now``. An enabled definition is left unchanged (its pending fire
        time kept). Whether the definition exists."""
        ...

    def get_due_recurring(self, now: datetime, limit: int) -> list[RecurringRecord]:
        """Enabled definitions with ``next_fire_time <= now``, most overdue first, at
        most ``limit``, leaving out those held by overlap ``queue`` (their
        ``fired_job_id`` still active), so held ones never crowd out the rest. A plain
        read: firing is :meth:`try_fire_recurring`'s job."""
        ...

    def try_fire_recurring(
        self, recurring_id: str, expected: datetime, next_fire_time: datetime, job: JobRecord
    ) -> FireOutcome:
        """Compare-and-set on ``next_fire_time == expected``, then by the definition's
        overlap policy, all in one atom. If ``fired_job_id`` names a job still active and
        the policy is ``skip``: set ``next_fire_time`` and ``last_skip_time = expected``,
        insert nothing (``SKIPPED``); ``queue``: change nothing (``HELD``). Otherwise set
        ``next_fire_time``, ``last_fire_time = expected``, ``fired_job_id = job.id`` and
        insert ``job`` (``FIRED``). Unknown id, disabled definition or stale
        ``expected``: ``LOST``, nothing changed."""
        ...

    def next_due_time(self, after: datetime) -> datetime | None:
        """The earliest moment later than ``after`` at which :meth:`activate_due` or
        :meth:`get_due_recurring` finds work: the least ``due_at`` of the ``scheduled``
        and ``failed`` jobs and ``next_fire_time`` of the enabled recurring definitions,
        counting only those strictly after ``after``; ``None`` if there is none. A plain read,
        served by the indexes those two use (cheap enough for every scheduler pass):
        a scheduler sleeps until then instead of polling. Work due at or before
        ``after`` is not reported (the pass at ``after`` has already seen it)."""
        ...


@runtime_checkable
class WorkflowStorage(Protocol):
    """Workflow instances (checkpointed documents) and bookmarks (durable waits)."""

    def create_instance(
        self,
        instance: WorkflowInstanceRecord,
        enqueue: Sequence[JobRecord] = (),
        bookmarks: Sequence[BookmarkRecord] = (),
    ) -> None:
        """Store ``instance`` with revision 1 (whatever it carries), insert ``enqueue``
        (with :meth:`JobStorage.enqueue` semantics) and ``bookmarks`` in the same atom, so
        a started instance is never stranded without its first job or its first wait. A
        duplicate instance id raises :class:`~millrace_django.errors.ConcurrencyConflict`;
        any refusal stores nothing."""
        ...

    def create_instances(self, starts: Sequence[NewInstance]) -> None:
        """:meth:`create_instance` for many instances in one atom: every instance with
        its jobs and bookmarks, or (a duplicate instance id raising
        :class:`~millrace_django.errors.ConcurrencyConflict`, any other refusal its
        error) nothing at all."""
        ...

    def get_instance(self, instance_id: UUID) -> WorkflowInstanceRecord | None: ...

    def get_instances(self, instance_ids: Collection[UUID]) -> dict[UUID, WorkflowInstanceRecord]:
        """The stored instances among ``instance_ids``, by id, in one read (unknown ids
        are left out): a worker reads the instances of a claimed batch of workflow jobs
        at once, so a step need not read its own."""
        ...

    def update_instance(self, instance: WorkflowInstanceRecord, expected_revision: int) -> None:
        """Replace the instance iff its stored revision is ``expected_revision``, writing
        ``expected_revision + 1``. Stale or missing (indistinguishable) raises
        :class:`~millrace_django.errors.ConcurrencyConflict`."""
        ...

    def add_bookmark(self, bookmark: BookmarkRecord) -> None: ...

    def consume_bookmark(
        self,
        signal_name: str,
        correlation_id: str,
        enqueue: Callable[[BookmarkRecord], Sequence[JobRecord]] | None = None,
    ) -> BookmarkRecord | None:
        """Delete and return the oldest matching bookmark (``created_at``, then id in
        RFC 4122 byte order), at most once under any concurrency; ``None`` if none waits.
        The jobs ``enqueue`` builds from the consumed bookmark are inserted in the same
        atom, so a delivered signal is never lost between the two."""
        ...

    def consume_bookmarks(
        self,
        wanted: Sequence[tuple[str, str]],
        enqueue: ResumeJobs | None = None,
    ) -> list[BookmarkRecord | None]:
        """:meth:`consume_bookmark` for many signals in one atom: for each
        ``(signal_name, correlation_id)`` of ``wanted``, in order, delete and return the
        oldest matching bookmark not taken by an earlier one of them (``None`` if there
        is none), then insert the jobs ``enqueue`` builds from all of them and from
        their instances (read in the same atom; an instance gone is left out). At most
        once under contention, as for one; if ``enqueue`` raises or its jobs cannot be
        stored, nothing is consumed."""
        ...

    def consume_bookmark_by_id(
        self,
        bookmark_id: UUID,
        enqueue: Callable[[BookmarkRecord], Sequence[JobRecord]] | None = None,
    ) -> BookmarkRecord | None:
        """Delete and return the bookmark ``bookmark_id``, at most once under any
        concurrency, also against :meth:`consume_bookmark` (whichever consumes it first
        wins, the other sees nothing); ``None`` if it is gone. The jobs ``enqueue`` builds
        are inserted in the same atom, exactly as for :meth:`consume_bookmark`. This is
        how a wait's timeout races its signal."""
        ...

    def cancel_instance(self, instance_id: UUID) -> bool:
        """Cancel a workflow instance, in one atom: unless it is unknown or already in a
        terminal state (then ``False``, nothing changes), its state becomes ``cancelled``
        with ``revision + 1`` and ``updated_at = now`` (data and cursor kept), every
        bookmark of the instance is deleted, and every job carrying its
        ``workflow_instance_id`` is cancelled as :meth:`JobStorage.try_cancel` would
        (pre-active jobs ``cancelled`` with their ``awaiting`` closure and keys released;
        ``processing`` ones flagged ``cancel_requested``). Returns ``True``. A checkpoint
        still in flight for the instance then fails its revision check."""
        ...


@runtime_checkable
class MonitoringStorage(Protocol):
    """The dashboard's read model; see :mod:`millrace_django.contract.monitoring`."""

    def get_statistics(self, tenant: TenantFilter) -> JobStatistics:
        """Counts for every job and instance state (zeros included), ``enqueued`` jobs per
        queue, recurring definitions and those overdue by the injected clock (one that
        overlap ``queue`` holds back, see :meth:`get_due_recurring`, is not). Exact as of
        one transaction, and never a count of the finished rows themselves: its cost does
        not grow with the jobs and instances finished and kept."""
        ...

    def fold_statistics(self, limit: int) -> int:
        """Compact what keeps the counts of finished jobs and instances (any of them
        unchanged), looking at most at ``limit`` records of it; returns how many went (0
        where counts are not kept that way). The scheduler calls it each pass."""
        ...

    def query_jobs(self, query: JobQuery) -> Page[JobSummary]:
        """Newest first (``created_at``, then id, descending); keyset-paged."""
        ...

    def get_job_details(self, job_id: UUID) -> JobDetails | None: ...

    def query_recurring(self, query: RecurringQuery) -> Page[RecurringSummary]:
        """Soonest first (``next_fire_time``, then id, ascending); keyset-paged."""
        ...

    def query_instances(self, query: InstanceQuery) -> Page[InstanceSummary]:
        """Newest first (``created_at``, then id, descending); keyset-paged."""
        ...

    def get_limit_usage(self) -> list[LimitUsage]:
        """Per queue and function whose jobs carry a limit, in scope order: the limit (as
        its latest job carries it) and how many of its active jobs run and wait (see
        :func:`~millrace_django.contract.usage_by_scope`). Reads the jobs in flight and
        the limited jobs waiting, never a finished job."""
        ...

    def get_throughput(self, since: datetime, until: datetime) -> list[ThroughputPoint]:
        """Jobs that ended ``succeeded`` or ``dead`` per UTC minute, counted by their
        ``finished_at``, for each minute ``m`` with ``floor(since) <= m < floor(until)``
        (both bounds floored to the minute), oldest first, zeros included. A window
        wider than :data:`~millrace_django.contract.monitoring.THROUGHPUT_MINUTES_CAP`
        minutes keeps its newest minutes. Jobs purged or deleted are no longer counted.
        Cost is bounded by the jobs finished within the window (a range of the finished
        jobs' index), never by the table's size."""
        ...

    def get_catalog(
        self, tenant: TenantFilter, target: str | None = None, tag: str | None = None
    ) -> list[CatalogEntry]:
        """One entry per job function with jobs of ``tenant`` stored (only ``target``'s
        when given; with ``tag``, only the functions whose jobs were ever stored with
        that tag; none if none), by target: its jobs per state (every state, zeros
        included), its last error and its tags (see
        :class:`~millrace_django.contract.catalog.CatalogEntry`). Finished jobs are
        counted from the maintained counts and at most one is read per function, its
        newest dead one (per queue): the cost does not grow with the finished jobs."""
        ...


@runtime_checkable
class Storage(JobStorage, WorkflowStorage, MonitoringStorage, Protocol):
    """A complete provider: the three contracts over the same data."""


@runtime_checkable
class WakeupSubscription(Protocol):
    """A live subscription to wake-up hints for a set of queues."""

    def wait(self, timeout: float) -> bool:
        """Block up to ``timeout`` seconds; ``True`` if a hint arrived (hints coalesce)."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class Notifier(Protocol):
    """Optional "look now" hints, fired after commit when jobs become claimable.

    Hints may be dropped, duplicated or spurious: correctness never rests on them, the
    worker's poll ceiling does.
    """

    def listen(self, queues: Collection[str]) -> WakeupSubscription: ...
