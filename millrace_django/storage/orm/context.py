"""What every part of the ORM provider shares: the alias, the clock, the vendor's
strategy and the transaction runner."""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING

from django.db import connections
from django.db.models import QuerySet

from millrace_django.clock import Clock
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


class OrmContext:
    """One storage's view of its database. Internal to the ORM provider: every module
    of it takes one, nothing outside it should."""

    def __init__(
        self,
        alias: str,
        clock: Clock,
        vendor: Vendor,
        tx: Transactions,
        *,
        notify_channel: str | None = None,
    ) -> None:
        self.alias = alias
        self.clock = clock
        self.vendor = vendor
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
