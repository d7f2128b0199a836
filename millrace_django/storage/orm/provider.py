"""``DjangoStorage``: the job, workflow and monitoring contracts on one database alias."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from contextlib import AbstractContextManager
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from functools import partial
from uuid import UUID

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import connections, transaction

from millrace_django.clock import Clock, SystemClock
from millrace_django.contract import (
    BookmarkRecord,
    Capabilities,
    CatalogEntry,
    CheckpointReport,
    ClaimRequest,
    FireOutcome,
    InstanceQuery,
    InstanceSummary,
    JobDetails,
    JobQuery,
    JobRecord,
    JobStatistics,
    JobSummary,
    JobTransition,
    LimitUsage,
    NewInstance,
    Page,
    ProgressReport,
    RecurringChange,
    RecurringQuery,
    RecurringRecord,
    RecurringSummary,
    ResumeJobs,
    TenantFilter,
    ThroughputPoint,
    WakeupSubscription,
    WorkerHeartbeat,
    WorkflowInstanceRecord,
)
from millrace_django.errors import StorageError
from millrace_django.storage.orm import tallies
from millrace_django.storage.orm.catalog import catalog
from millrace_django.storage.orm.context import HotPath, OrmContext
from millrace_django.storage.orm.hotpath import OrmHotPath
from millrace_django.storage.orm.job_storage import OrmJobs
from millrace_django.storage.orm.limits import forget_idle_limits, limit_usage
from millrace_django.storage.orm.monitoring import OrmMonitoring
from millrace_django.storage.orm.notify import DEFAULT_CHANNEL, PostgresWakeups
from millrace_django.storage.orm.postgresql.hotpath import PostgresHotPath
from millrace_django.storage.orm.transactions import (
    DEFAULT_ATTEMPTS,
    DEFAULT_STATEMENT_TIMEOUT,
    Transactions,
)
from millrace_django.storage.orm.vendors import ConfigurationProblem, Vendor, vendor_for
from millrace_django.storage.orm.vendors.postgresql import PostgreSQL
from millrace_django.storage.orm.workflows import OrmWorkflows


def configuration_problems(alias: str) -> list[ConfigurationProblem]:
    """Why ``alias`` cannot host the storage as configured (empty when it can); shared
    with the system checks so a bad setting fails at start-up, not under load."""
    problems = []
    if not settings.USE_TZ:
        problems.append(
            ConfigurationProblem(
                "USE_TZ must be True: every instant the storage keeps is aware UTC",
                "Set USE_TZ = True in your settings (Django's default).",
            )
        )
    connection = connections[alias]
    problems += vendor_for(connection).configuration_problems(connection.settings_dict)
    return [replace(p, message=f"database {alias!r}: {p.message}") for p in problems]


def hot_path_for(vendor: Vendor) -> HotPath:
    """PostgreSQL's hand-written statements on PostgreSQL, the ORM's elsewhere."""
    if isinstance(vendor, PostgreSQL):
        return PostgresHotPath(several_statements=vendor.client_binding, prepare=vendor.prepare)
    return OrmHotPath()


class DjangoStorage:
    """Durable storage through the Django ORM on ``alias``; every "now" from ``clock``.

    Each call runs in its own short transaction (joining the caller's, as a savepoint,
    when called inside ``transaction.atomic`` on the same alias, which is what makes an
    enqueue transactional with the application's own writes).

    It is also a :class:`~millrace_django.contract.Notifier`: on PostgreSQL hints travel
    by ``NOTIFY`` on ``notify_channel`` (set it apart only when several Millrace schemas
    share one database) and reach every process; elsewhere they are in-process only.

    And it is a :class:`~millrace_django.clock.DatabaseTime`: it reads the database
    server's clock for nodes to calibrate theirs (never to compare with).
    """

    def __init__(
        self,
        alias: str = "default",
        clock: Clock | None = None,
        *,
        statement_timeout: timedelta = DEFAULT_STATEMENT_TIMEOUT,
        transaction_attempts: int = DEFAULT_ATTEMPTS,
        notify_channel: str = DEFAULT_CHANNEL,
    ) -> None:
        problems = configuration_problems(alias)
        if problems:
            raise ImproperlyConfigured("; ".join(problem.message for problem in problems))
        self.alias = alias
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.vendor: Vendor = vendor_for(connections[alias])
        self._wakeups = self.vendor.wakeups(alias, notify_channel)
        tx = Transactions(
            alias,
            self.vendor,
            statement_timeout=statement_timeout,
            attempts=transaction_attempts,
            announce=self._wakeups.announce,
            record_tally=partial(tallies.record, alias),
        )
        channel = self._wakeups.channel if isinstance(self._wakeups, PostgresWakeups) else None
        self._tx = tx
        ctx = OrmContext(
            alias, self.clock, self.vendor, hot_path_for(self.vendor), tx, notify_channel=channel
        )
        self._ctx = ctx
        self._jobs = OrmJobs(ctx)
        self._workflows = OrmWorkflows(ctx)
        self._monitoring = OrmMonitoring(ctx)

    # -- JobStorage --------------------------------------------------------------------

    @property
    def capabilities(self) -> Capabilities:
        return self._jobs.capabilities

    def enqueue(self, jobs: Sequence[JobRecord]) -> list[UUID]:
        return self._jobs.enqueue(jobs)

    def claim(self, request: ClaimRequest) -> list[JobRecord]:
        return self._jobs.claim(request)

    def renew_leases(self, worker_id: str, ids: Collection[UUID], lease: timedelta) -> set[UUID]:
        return self._jobs.renew_leases(worker_id, ids, lease)

    def apply(self, transition: JobTransition) -> bool:
        return self._jobs.apply(transition)

    def apply_many(self, transitions: Sequence[JobTransition]) -> list[bool | StorageError]:
        return self._jobs.apply_many(transitions)

    def transaction(self) -> AbstractContextManager[object]:
        """``transaction.atomic`` on this storage's alias, for atomic jobs (see
        :class:`~millrace_django.contract.transactions.JoinableTransactions`): this
        storage's calls on the same thread inside it run in savepoints of it."""
        return transaction.atomic(using=self.alias)

    def report_progress(self, report: ProgressReport) -> bool:
        return self._jobs.report_progress(report)

    def save_checkpoint(self, report: CheckpointReport) -> bool:
        return self._jobs.save_checkpoint(report)

    def try_cancel(self, job_id: UUID) -> bool:
        return self._jobs.try_cancel(job_id)

    def try_run_now(self, job_id: UUID) -> bool:
        return self._jobs.try_run_now(job_id)

    def get_job(self, job_id: UUID) -> JobRecord | None:
        return self._jobs.get_job(job_id)

    def activate_due(self, now: datetime, limit: int) -> int:
        return self._jobs.activate_due(now, limit)

    def expire_due(self, now: datetime, limit: int) -> int:
        return self._jobs.expire_due(now, limit)

    def forget_idle_limits(self, before: datetime, limit: int) -> int:
        return forget_idle_limits(self._ctx, before, limit)

    def purge_finished(self, before: datetime, limit: int) -> int:
        return self._jobs.purge_finished(before, limit)

    def fold_statistics(self, limit: int) -> int:
        """Fold the maintained counts' rows, each group's into one (see :mod:`.tallies`)."""
        return tallies.fold(self._ctx, limit)

    def delete_job(self, job_id: UUID) -> bool:
        return self._jobs.delete_job(job_id)

    def pause_queue(self, queue: str) -> None:
        self._jobs.pause_queue(queue)

    def resume_queue(self, queue: str) -> None:
        self._jobs.resume_queue(queue)

    def paused_queues(self) -> set[str]:
        return self._jobs.paused_queues()

    def record_worker_heartbeat(self, heartbeat: WorkerHeartbeat) -> None:
        self._jobs.record_worker_heartbeat(heartbeat)

    def list_workers(self) -> list[WorkerHeartbeat]:
        return self._jobs.list_workers()

    def forget_workers(self, seen_before: datetime) -> int:
        return self._jobs.forget_workers(seen_before)

    def upsert_recurring(self, record: RecurringRecord) -> None:
        self._jobs.upsert_recurring(record)

    def edit_recurring(self, recurring_id: str, change: RecurringChange) -> bool:
        return self._jobs.edit_recurring(recurring_id, change)

    def get_recurring(self, recurring_id: str) -> RecurringRecord | None:
        return self._jobs.get_recurring(recurring_id)

    def remove_recurring(self, recurring_id: str) -> bool:
        return self._jobs.remove_recurring(recurring_id)

    def disable_recurring(self, recurring_id: str) -> bool:
        return self._jobs.disable_recurring(recurring_id)

    def enable_recurring(self, recurring_id: str, next_fire_time: datetime) -> bool:
        return self._jobs.enable_recurring(recurring_id, next_fire_time)

    def get_due_recurring(self, now: datetime, limit: int) -> list[RecurringRecord]:
        return self._jobs.get_due_recurring(now, limit)

    def try_fire_recurring(
        self, recurring_id: str, expected: datetime, next_fire_time: datetime, job: JobRecord
    ) -> FireOutcome:
        return self._jobs.try_fire_recurring(recurring_id, expected, next_fire_time, job)

    def next_due_time(self, after: datetime) -> datetime | None:
        return self._jobs.next_due_time(after)

    # -- Notifier ----------------------------------------------------------------------

    def listen(self, queues: Collection[str]) -> WakeupSubscription:
        """Hints for ``queues``: each wait returns ``True`` after a commit that made
        jobs of one of them claimable (coalesced; may be spurious, may be lost)."""
        return self._wakeups.listen(queues)

    # -- DatabaseTime ------------------------------------------------------------------

    def database_time(self) -> datetime | None:
        """The database server's clock now (one bounded round trip); ``None`` where the
        database runs on this machine's clock (SQLite)."""
        sql = self.vendor.current_time_sql
        if sql is None:
            return None
        return self._tx.read(lambda: _read_time(self.alias, sql))

    # -- WorkflowStorage ---------------------------------------------------------------

    def create_instance(
        self,
        instance: WorkflowInstanceRecord,
        enqueue: Sequence[JobRecord] = (),
        bookmarks: Sequence[BookmarkRecord] = (),
    ) -> None:
        self._workflows.create_instance(instance, enqueue, bookmarks)

    def create_instances(self, starts: Sequence[NewInstance]) -> None:
        self._workflows.create_instances(starts)

    def get_instance(self, instance_id: UUID) -> WorkflowInstanceRecord | None:
        return self._workflows.get_instance(instance_id)

    def get_instances(self, instance_ids: Collection[UUID]) -> dict[UUID, WorkflowInstanceRecord]:
        return self._workflows.get_instances(instance_ids)

    def update_instance(self, instance: WorkflowInstanceRecord, expected_revision: int) -> None:
        self._workflows.update_instance(instance, expected_revision)

    def add_bookmark(self, bookmark: BookmarkRecord) -> None:
        self._workflows.add_bookmark(bookmark)

    def consume_bookmark(
        self,
        signal_name: str,
        correlation_id: str,
        enqueue: Callable[[BookmarkRecord], Sequence[JobRecord]] | None = None,
    ) -> BookmarkRecord | None:
        return self._workflows.consume_bookmark(signal_name, correlation_id, enqueue)

    def consume_bookmarks(
        self,
        wanted: Sequence[tuple[str, str]],
        enqueue: ResumeJobs | None = None,
    ) -> list[BookmarkRecord | None]:
        return self._workflows.consume_bookmarks(wanted, enqueue)

    def consume_bookmark_by_id(
        self,
        bookmark_id: UUID,
        enqueue: Callable[[BookmarkRecord], Sequence[JobRecord]] | None = None,
    ) -> BookmarkRecord | None:
        return self._workflows.consume_bookmark_by_id(bookmark_id, enqueue)

    def cancel_instance(self, instance_id: UUID) -> bool:
        return self._workflows.cancel_instance(instance_id)

    # -- MonitoringStorage -------------------------------------------------------------

    def get_statistics(self, tenant: TenantFilter) -> JobStatistics:
        return self._monitoring.get_statistics(tenant)

    def query_jobs(self, query: JobQuery) -> Page[JobSummary]:
        return self._monitoring.query_jobs(query)

    def get_limit_usage(self) -> list[LimitUsage]:
        return limit_usage(self._ctx)

    def get_job_details(self, job_id: UUID) -> JobDetails | None:
        return self._monitoring.get_job_details(job_id)

    def query_recurring(self, query: RecurringQuery) -> Page[RecurringSummary]:
        return self._monitoring.query_recurring(query)

    def query_instances(self, query: InstanceQuery) -> Page[InstanceSummary]:
        return self._monitoring.query_instances(query)

    def get_throughput(self, since: datetime, until: datetime) -> list[ThroughputPoint]:
        return self._monitoring.get_throughput(since, until)

    def get_catalog(
        self, tenant: TenantFilter, target: str | None = None, tag: str | None = None
    ) -> list[CatalogEntry]:
        return self._ctx.tx.read(lambda: catalog(self._ctx, tenant, target, tag))


def _read_time(alias: str, sql: str) -> datetime:
    with connections[alias].cursor() as cursor:
        cursor.execute(sql)
        (value,) = cursor.fetchone()
    if not isinstance(value, datetime):
        raise StorageError(f"{sql!r} returned {value!r}, not a timestamp")
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
