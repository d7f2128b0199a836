"""Workflow instances (revision-fenced documents) and bookmarks (durable waits)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from uuid import UUID

from django.db import IntegrityError

from millrace_django.contract import BookmarkRecord, JobRecord, WorkflowInstanceRecord
from millrace_django.errors import ConcurrencyConflict, StorageError
from millrace_django.storage.orm import queries
from millrace_django.storage.orm.context import OrmContext
from millrace_django.storage.orm.inserts import insert_jobs
from millrace_django.storage.orm.rows import (
    bookmark_record,
    bookmark_row,
    instance_fields,
    instance_record,
)


def checkpoint(ctx: OrmContext, instance: WorkflowInstanceRecord, expected_revision: int) -> None:
    """Replace the instance iff it is still at ``expected_revision``; a stale or missing
    instance raises (and so rolls back the caller's transaction)."""
    updated = (
        ctx.instances()
        .filter(id=instance.id, revision=expected_revision)
        .update(**instance_fields(instance, expected_revision + 1))
    )
    if not updated:
        raise ConcurrencyConflict(
            f"workflow instance {instance.id} is not at revision {expected_revision}"
        )


class OrmWorkflows:
    """:class:`~millrace_django.contract.WorkflowStorage` over the ORM."""

    def __init__(self, ctx: OrmContext) -> None:
        self._ctx = ctx

    def create_instance(
        self, instance: WorkflowInstanceRecord, enqueue: Sequence[JobRecord] = ()
    ) -> None:
        def create() -> None:
            try:
                self._ctx.instances().create(id=instance.id, **instance_fields(instance, 1))
            except IntegrityError as error:
                raise ConcurrencyConflict(
                    f"workflow instance {instance.id} already exists"
                ) from error
            insert_jobs(self._ctx, enqueue)

        self._ctx.tx.write(create)

    def get_instance(self, instance_id: UUID) -> WorkflowInstanceRecord | None:
        row = self._ctx.tx.read(lambda: self._ctx.instances().filter(id=instance_id).first())
        return instance_record(row) if row is not None else None

    def update_instance(self, instance: WorkflowInstanceRecord, expected_revision: int) -> None:
        self._ctx.tx.write(lambda: checkpoint(self._ctx, instance, expected_revision))

    def add_bookmark(self, bookmark: BookmarkRecord) -> None:
        def add() -> None:
            try:
                self._ctx.bookmarks().bulk_create([bookmark_row(bookmark)])
            except IntegrityError as error:
                raise StorageError(f"bookmark {bookmark.id} already exists") from error

        self._ctx.tx.write(add)

    def consume_bookmark(
        self,
        signal_name: str,
        correlation_id: str,
        enqueue: Callable[[BookmarkRecord], Sequence[JobRecord]] | None = None,
    ) -> BookmarkRecord | None:
        def consume() -> BookmarkRecord | None:
            row = queries.oldest_bookmark(
                self._ctx.bookmarks(), self._ctx.vendor, signal_name, correlation_id
            ).first()
            if row is None:
                return None
            self._ctx.bookmarks().filter(id=row.id).delete()
            consumed = bookmark_record(row)
            if enqueue is not None:
                insert_jobs(self._ctx, enqueue(consumed))
            return consumed

        return self._ctx.tx.write(consume)
