"""What every part of the ORM provider shares: the alias, the clock, the vendor's
strategy, the hot path and the transaction runner (and the hot path's seam, with the
chains of workflow steps it checkpoints)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property
from typing import TYPE_CHECKING, Protocol
from uuid import UUID

from django.db import connections
from django.db.models import QuerySet

from millrace_django.clock import Clock
from millrace_django.contract import (
    BookmarkRecord,
    ClaimRequest,
    JobRecord,
    JobTransition,
    RecurringRecord,
    WorkflowCheckpoint,
    WorkflowInstanceRecord,
)
from millrace_django.dbschema import tracks_key_scope
from millrace_django.models import (
    Bookmark,
    FinishedMinute,
    Job,
    JobAttempt,
    JobLog,
    Limit,
    PausedQueue,
    Recurring,
    Tally,
    Worker,
    WorkflowInstance,
)
from millrace_django.storage.orm.transactions import Transactions

if TYPE_CHECKING:
    from millrace_django.storage.orm.vendors import Vendor


@dataclass(frozen=True, slots=True)
class Occurrence:
    """A recurring definition's occurrence to fire: ``recurring_id`` due at ``expected``,
    moved on to ``next_fire_time``, with ``job`` its job."""

    recurring_id: str
    expected: datetime
    next_fire_time: datetime
    job: JobRecord


@dataclass(frozen=True, slots=True)
class Chain:
    """The steps of one instance acknowledged together, in order, each expecting the
    revision the one before it leaves (siblings the worker re-planned one onto another):
    written at once if every one's fence holds, as the last one's checkpoint moving the
    revision on by as many steps, which is what applying them one by one would store
    (:mod:`.steps` writes them; here beside :class:`HotPath`, which checkpoints them)."""

    steps: tuple[JobTransition, ...]

    @property
    def checkpoint(self) -> WorkflowCheckpoint:
        last, first = self.steps[-1].checkpoint, self.steps[0].checkpoint
        assert last is not None and first is not None
        return WorkflowCheckpoint(instance=last.instance, expected_revision=first.expected_revision)


class HotPath(Protocol):
    """The claim, acknowledgement and insert statements: the ORM's
    (:class:`~.hotpath.OrmHotPath`) or a database's own, hand-written
    (:mod:`millrace_django.storage.orm.postgresql`); internal to the ORM provider, not an
    extension point.

    Where a method sends exactly one statement (which announces whatever it makes
    claimable itself), the ``..._is_one_statement`` predicates say so, and the call may
    run that statement alone in autocommit (see ``Transactions.write``)."""

    claim_is_one_statement: bool
    activate_is_one_statement: bool

    def complete_is_one_statement(
        self, ctx: OrmContext, transitions: Sequence[JobTransition]
    ) -> bool: ...

    def insert_is_one_statement(self, ctx: OrmContext, jobs: Sequence[JobRecord]) -> bool: ...

    def claim(self, ctx: OrmContext, request: ClaimRequest) -> list[JobRecord]:
        """Lease up to ``request.max_count`` claimable jobs (see ``JobStorage.claim``)."""
        ...

    def insert(self, ctx: OrmContext, jobs: Sequence[JobRecord]) -> list[UUID] | None:
        """Insert ``jobs``, well-formed and none of them ``awaiting``, with enqueue
        semantics (see :func:`~millrace_django.storage.orm.inserts.insert_jobs`) and
        announce the enqueued ones; ``None`` when there is no such statement here (the
        portable path then runs)."""
        ...

    def activate(self, ctx: OrmContext, now: datetime, limit: int) -> int | None:
        """Enqueue the first ``limit`` jobs due by ``now`` (see ``JobStorage.activate_due``)
        and announce them, in one statement; ``None`` when there is no such statement
        here."""
        ...

    def due_heads(self, ctx: OrmContext, after: datetime) -> list[datetime | None] | None:
        """The first due time after ``after`` of the waiting jobs and of the recurring
        definitions (``None`` where there is none), in one statement; ``None`` when there
        is no such statement here."""
        ...

    def due_recurring(
        self, ctx: OrmContext, now: datetime, limit: int
    ) -> list[RecurringRecord] | None:
        """The first ``limit`` recurring definitions due at ``now`` (see
        ``JobStorage.get_due_recurring``), in one statement; ``None`` when there is no
        such statement here (the portable path then runs)."""
        ...

    def fire_is_one_statement(self, ctx: OrmContext, job: JobRecord) -> bool:
        """Whether :meth:`fire` of an occurrence of ``job`` is one statement (see
        ``Transactions.write``)."""
        ...

    def fire(self, ctx: OrmContext, occurrence: Occurrence) -> bool:
        """Fire ``occurrence`` if its definition is still due at it and its overlap
        policy allows it now: move the definition on and insert the job (announced);
        whether it fired. A refusal changes nothing (see
        ``JobStorage.try_fire_recurring`` for what it may mean)."""
        ...

    def checkpoint(self, ctx: OrmContext, chains: Sequence[Chain]) -> list[bool | None]:
        """Lock the jobs of ``chains`` (workflow successes of distinct jobs, one chain
        per instance) whose fence holds, and set the checkpoint of each chain whose
        fences all hold and whose instance is unfinished and at its expected revision.
        Per step, chain after chain: ``True`` (fenced, checkpoint set), ``None``
        (fenced, nothing set) or ``False`` (fence lost)."""
        ...

    def get_instances(
        self, ctx: OrmContext, ids: Sequence[UUID]
    ) -> dict[UUID, WorkflowInstanceRecord] | None:
        """The instances of ``ids`` that exist, by id, in one statement; ``None`` when
        there is no such statement here (the portable path then runs)."""
        ...

    def take_bookmarks(
        self, ctx: OrmContext, wanted: Sequence[tuple[str, str]]
    ) -> tuple[list[BookmarkRecord], dict[UUID, WorkflowInstanceRecord]] | None:
        """Delete and return the bookmarks ``wanted`` takes (for each key, its oldest
        unlocked ones, as many as the key is named) with their instances, in one
        statement; ``None`` when there is no such statement here (the portable path
        then runs)."""
        ...

    def complete(self, ctx: OrmContext, transitions: Sequence[JobTransition]) -> list[bool]:
        """Apply plain ``succeeded`` transitions of distinct jobs (no inserts, checkpoint,
        bookmarks, error or cancel cascade) set-based, each fenced on its own."""
        ...


class OrmContext:
    """One storage's view of its database. Internal to the ORM provider: every module
    of it takes one, nothing outside it should."""

    def __init__(
        self,
        alias: str,
        clock: Clock,
        vendor: Vendor,
        hot_path: HotPath,
        tx: Transactions,
        *,
        notify_channel: str | None = None,
    ) -> None:
        self.alias = alias
        self.clock = clock
        self.vendor = vendor
        self.hot_path = hot_path
        self.tx = tx
        self.notify_channel = notify_channel
        """The PostgreSQL ``NOTIFY`` channel of wake-up hints, for statements that
        announce what they enqueue themselves (``None``: hints are not SQL)."""

    @cached_property
    def track_scope(self) -> bool:
        """Whether inserts and terminal moves maintain ``Job.key_scope`` (see
        :func:`~millrace_django.dbschema.tracks_key_scope`)."""
        return tracks_key_scope(connections[self.alias])

    def jobs(self) -> QuerySet[Job]:
        return Job.objects.using(self.alias)

    def attempts(self) -> QuerySet[JobAttempt]:
        return JobAttempt.objects.using(self.alias)

    def logs(self) -> QuerySet[JobLog]:
        return JobLog.objects.using(self.alias)

    def recurring(self) -> QuerySet[Recurring]:
        return Recurring.objects.using(self.alias)

    def instances(self) -> QuerySet[WorkflowInstance]:
        return WorkflowInstance.objects.using(self.alias)

    def bookmarks(self) -> QuerySet[Bookmark]:
        return Bookmark.objects.using(self.alias)

    def limits(self) -> QuerySet[Limit]:
        return Limit.objects.using(self.alias)

    def paused(self) -> QuerySet[PausedQueue]:
        return PausedQueue.objects.using(self.alias)

    def finished_minutes(self) -> QuerySet[FinishedMinute]:
        return FinishedMinute.objects.using(self.alias)

    def tallies(self) -> QuerySet[Tally]:
        return Tally.objects.using(self.alias)

    def workers(self) -> QuerySet[Worker]:
        return Worker.objects.using(self.alias)
