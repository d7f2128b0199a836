"""Workflow instances (revision-fenced documents) and bookmarks (durable waits)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Sequence
from typing import Any
from uuid import UUID

from django.db import IntegrityError
from django.db.models import Case, Value, When

from millrace_django.contract import (
    ACTIVE_JOB_STATES,
    PRE_ACTIVE_JOB_STATES,
    TERMINAL_INSTANCE_STATES,
    BookmarkRecord,
    InstanceState,
    JobRecord,
    NewInstance,
    ResumeJobs,
    WorkflowCheckpoint,
    WorkflowInstanceRecord,
)
from millrace_django.errors import ConcurrencyConflict, StorageError
from millrace_django.models import INSTANCE_STATE_CODES, WorkflowInstance, job_codes
from millrace_django.models import JobStateCode as Code
from millrace_django.storage.orm import queries, tallies
from millrace_django.storage.orm.context import OrmContext
from millrace_django.storage.orm.continuations import cancel_awaiting_closure
from millrace_django.storage.orm.inserts import insert_jobs
from millrace_django.storage.orm.rows import (
    INSTANCE_COLUMNS,
    bookmark_record,
    bookmark_row,
    instance_fields,
    instance_record,
)

_ACTIVE = job_codes(ACTIVE_JOB_STATES)
_PRE_ACTIVE = job_codes(PRE_ACTIVE_JOB_STATES)
_TERMINAL_INSTANCE = [INSTANCE_STATE_CODES[s] for s in TERMINAL_INSTANCE_STATES]
_INSTANCE_FIELDS = {field.name: field for field in WorkflowInstance._meta.concrete_fields}


def checkpoint(ctx: OrmContext, instance: WorkflowInstanceRecord, expected_revision: int) -> None:
    """Replace the instance iff it is still at ``expected_revision``; a stale or missing
    instance raises (and so rolls back the caller's transaction).

    The counts follow: the update asks for an unfinished stored state (the usual case,
    which only counts an instance that ends here), and only if that finds nothing is the
    row read (locked) to tell a stale revision from a finished instance rewritten (rare),
    whose count then moves to its new state, finished or not."""
    if checkpoint_unfinished(ctx, instance, expected_revision):
        return
    stored = ctx.instances().filter(id=instance.id, revision=expected_revision)
    fields = instance_fields(instance, expected_revision + 1)
    state = fields["state"]
    was = stored.select_for_update().values_list("state", "definition_id", "tenant_id").first()
    if was is None:
        raise ConcurrencyConflict(
            f"workflow instance {instance.id} is not at revision {expected_revision}"
        )
    stored.update(**fields)
    change: Counter[Any] = Counter()
    if state in tallies.TERMINAL_INSTANCE_CODES:
        change.update(tallies.instance_ended(state, instance.definition_id, instance.tenant_id))
    if was[0] in tallies.TERMINAL_INSTANCE_CODES:
        change.subtract(tallies.instance_ended(*was))
    ctx.tx.tally(change)


def checkpoint_unfinished(
    ctx: OrmContext, instance: WorkflowInstanceRecord, expected_revision: int
) -> bool:
    """Replace the instance iff it is unfinished and still at ``expected_revision``
    (counting it if it ends here); ``False`` if it is not (nothing written)."""
    fields = instance_fields(instance, expected_revision + 1)
    stored = ctx.instances().filter(id=instance.id, revision=expected_revision)
    if not stored.exclude(state__in=_TERMINAL_INSTANCE).update(**fields):
        return False
    state = fields["state"]
    if state in tallies.TERMINAL_INSTANCE_CODES:
        ctx.tx.tally(tallies.instance_ended(state, instance.definition_id, instance.tenant_id))
    return True


def checkpoint_many(
    ctx: OrmContext, checkpoints: Sequence[tuple[WorkflowCheckpoint, int]]
) -> set[UUID]:
    """Checkpoints of distinct instances, each moving its revision on by the given
    number of steps (one, but for a chain of siblings), in two statements: the instances
    are read and locked, and those unfinished and at their expected revision replaced
    by one ``UPDATE``. Returns their ids."""
    steps = {c.instance.id: n for c, n in checkpoints}
    wanted = {c.instance.id: c for c, _ in checkpoints}
    stored = (
        ctx.instances()
        .select_for_update()
        .filter(id__in=list(wanted))
        .values_list("id", "revision", "state")
    )
    won = {
        instance_id: wanted[instance_id]
        for instance_id, revision, state in stored
        if revision == wanted[instance_id].expected_revision and state not in _TERMINAL_INSTANCE
    }
    if not won:
        return set()
    rows = {i: instance_fields(c.instance, c.expected_revision + steps[i]) for i, c in won.items()}
    columns = next(iter(rows.values())).keys()
    ctx.instances().filter(id__in=list(won)).update(
        **{column: _per_instance(rows, column) for column in columns}
    )
    ended: Counter[Any] = Counter()
    for fields in rows.values():
        if fields["state"] in tallies.TERMINAL_INSTANCE_CODES:
            ended.update(
                tallies.instance_ended(
                    fields["state"], fields["definition_id"], fields["tenant_id"]
                )
            )
    if ended:
        ctx.tx.tally(ended)
    return set(won)


def _per_instance(rows: dict[UUID, dict[str, Any]], column: str) -> Case:
    field = _INSTANCE_FIELDS[column]
    whens = [
        When(id=i, then=Value(fields[column], output_field=field)) for i, fields in rows.items()
    ]
    return Case(*whens, output_field=field)


def oldest_first(
    wanted: Sequence[tuple[str, str]], bookmarks: Sequence[BookmarkRecord]
) -> list[BookmarkRecord | None]:
    """For each key of ``wanted`` in order, the oldest of ``bookmarks`` with that key not
    given to an earlier one (``created_at``, then id in RFC 4122 byte order)."""
    waiting: dict[tuple[str, str], list[BookmarkRecord]] = {}
    for b in bookmarks:
        waiting.setdefault((b.signal_name, b.correlation_id), []).append(b)
    for matches in waiting.values():
        matches.sort(key=lambda b: (b.created_at, b.id.bytes), reverse=True)
    return [waiting[key].pop() if waiting.get(key) else None for key in wanted]


class OrmWorkflows:
    """:class:`~millrace_django.contract.WorkflowStorage` over the ORM."""

    def __init__(self, ctx: OrmContext) -> None:
        self._ctx = ctx

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
        def create() -> None:
            instances = [start.instance for start in starts]
            rows = [WorkflowInstance(id=i.id, **instance_fields(i, 1)) for i in instances]
            try:
                self._ctx.instances().bulk_create(rows)
            except IntegrityError as error:
                ids = ", ".join(str(i.id) for i in instances)
                raise ConcurrencyConflict(
                    f"a workflow instance among {ids} already exists"
                    if len(instances) > 1
                    else f"workflow instance {ids} already exists"
                ) from error
            ended: Counter[Any] = Counter()
            for i in instances:
                state = INSTANCE_STATE_CODES[i.state]
                if state in tallies.TERMINAL_INSTANCE_CODES:
                    ended.update(tallies.instance_ended(state, i.definition_id, i.tenant_id))
            if ended:
                self._ctx.tx.tally(ended)
            insert_jobs(self._ctx, [job for start in starts for job in start.enqueue])
            bookmarks = [bookmark for start in starts for bookmark in start.bookmarks]
            if bookmarks:
                self._insert_bookmarks(bookmarks)

        if starts:
            self._ctx.tx.write(create)

    def get_instance(self, instance_id: UUID) -> WorkflowInstanceRecord | None:
        rows = self._ctx.tx.read(  # (read inside the call: a query set is lazy)
            lambda: list(
                self._ctx.instances().filter(id=instance_id).values_list(*INSTANCE_COLUMNS)[:1]
            )
        )
        return instance_record(rows[0]) if rows else None

    def get_instances(self, instance_ids: Collection[UUID]) -> dict[UUID, WorkflowInstanceRecord]:
        if not instance_ids:
            return {}
        ids = list(instance_ids)

        def read() -> dict[UUID, WorkflowInstanceRecord]:
            found = self._ctx.hot_path.get_instances(self._ctx, ids)
            if found is not None:
                return found
            rows = self._ctx.instances().filter(id__in=ids).values_list(*INSTANCE_COLUMNS)
            return {row[0]: instance_record(row) for row in rows}

        return self._ctx.tx.read(read)

    def update_instance(self, instance: WorkflowInstanceRecord, expected_revision: int) -> None:
        self._ctx.tx.write(lambda: checkpoint(self._ctx, instance, expected_revision))

    def add_bookmark(self, bookmark: BookmarkRecord) -> None:
        self._ctx.tx.write(lambda: self._insert_bookmarks([bookmark]))

    def _insert_bookmarks(self, bookmarks: Sequence[BookmarkRecord]) -> None:
        try:
            self._ctx.bookmarks().bulk_create([bookmark_row(b) for b in bookmarks])
        except IntegrityError as error:
            ids = ", ".join(str(b.id) for b in bookmarks)
            raise StorageError(f"a bookmark among {ids} already exists") from error

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

    def consume_bookmarks(
        self,
        wanted: Sequence[tuple[str, str]],
        enqueue: ResumeJobs | None = None,
    ) -> list[BookmarkRecord | None]:
        def consume() -> list[BookmarkRecord | None]:
            taken = self._ctx.hot_path.take_bookmarks(self._ctx, wanted)
            if taken is None:
                taken = self._take_bookmarks(wanted)
            found, instances = taken
            consumed = oldest_first(wanted, found)
            if enqueue is not None:
                insert_jobs(self._ctx, enqueue(consumed, instances))
            return consumed

        return self._ctx.tx.write(consume) if wanted else []

    def _take_bookmarks(
        self, wanted: Sequence[tuple[str, str]]
    ) -> tuple[list[BookmarkRecord], dict[UUID, WorkflowInstanceRecord]]:
        """The bookmarks ``wanted`` takes (the oldest of each key, as many as it is
        named), deleted, and their instances."""
        waiting = [
            bookmark_record(row) for row in queries.waiting_bookmarks(self._ctx.bookmarks(), wanted)
        ]
        found = [b for b in oldest_first(wanted, waiting) if b is not None]
        if found:
            self._ctx.bookmarks().filter(id__in=[b.id for b in found]).delete()
        return found, self.get_instances({b.instance_id for b in found})

    def consume_bookmark_by_id(
        self,
        bookmark_id: UUID,
        enqueue: Callable[[BookmarkRecord], Sequence[JobRecord]] | None = None,
    ) -> BookmarkRecord | None:
        def consume() -> BookmarkRecord | None:
            row = self._ctx.bookmarks().select_for_update().filter(id=bookmark_id).first()
            if row is None:
                return None
            self._ctx.bookmarks().filter(id=row.id).delete()
            consumed = bookmark_record(row)
            if enqueue is not None:
                insert_jobs(self._ctx, enqueue(consumed))
            return consumed

        return self._ctx.tx.write(consume)

    def cancel_instance(self, instance_id: UUID) -> bool:
        def cancel() -> bool:
            # Jobs first, as a transition locks its job before the instance; then the
            # instance, which serializes with every checkpoint; then the jobs again, to
            # catch those a checkpoint committed while this call waited for a lock.
            owned = self._lock_owned_jobs(instance_id)
            stored = (
                self._ctx.instances()
                .select_for_update()
                .filter(id=instance_id)
                .values_list("state", "revision", "definition_id", "tenant_id")
                .first()
            )
            if stored is None or stored[0] in _TERMINAL_INSTANCE:
                return False
            _, revision, definition_id, tenant_id = stored
            owned.update(self._lock_owned_jobs(instance_id))
            now = self._ctx.clock.now()
            cancelled = INSTANCE_STATE_CODES[InstanceState.CANCELLED]
            self._ctx.instances().filter(id=instance_id).update(
                state=cancelled, revision=revision + 1, updated_at=now
            )
            self._ctx.tx.tally(tallies.instance_ended(cancelled, definition_id, tenant_id))
            self._ctx.bookmarks().filter(instance_id=instance_id).delete()
            running = [uuid for uuid, (state, *_) in owned.items() if state == Code.PROCESSING]
            waiting = {uuid: job for uuid, job in owned.items() if job[0] in _PRE_ACTIVE}
            if running:
                self._ctx.jobs().filter(uuid__in=running).update(cancel_requested=True)
            if waiting:
                self._ctx.jobs().filter(uuid__in=list(waiting)).update(
                    state=Code.CANCELLED, finished_at=now, key_scope=None
                )
                self._ctx.tx.tally(
                    tallies.jobs_ended(
                        (Code.CANCELLED, *group, now) for _, *group in waiting.values()
                    )
                )
                for job_id in waiting:
                    cancel_awaiting_closure(self._ctx, job_id, now)
            return True

        return self._ctx.tx.write(cancel)

    def _lock_owned_jobs(self, instance_id: UUID) -> dict[UUID, tuple[int, str, str, str | None]]:
        """The active jobs of the instance (``uuid -> (state code, queue, target,
        tenant)``), rows locked."""
        rows = (
            self._ctx.jobs()
            .select_for_update()
            .filter(workflow_instance_id=instance_id, state__in=_ACTIVE)
            .order_by("seq")
            .values_list("uuid", "state", "queue", "target", "tenant_id")
        )
        return {uuid: (state, queue, target, tenant) for uuid, state, queue, target, tenant in rows}
