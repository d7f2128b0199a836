"""PostgreSQL's hot path: one statement, one round trip, per batch claim, batch
acknowledgement (which also wakes continuations and announces them) and enqueue (which
also announces what it enqueued), the reads the worker makes with a claim (the
instances of its workflow steps) and each step of the scheduler's due work (reading due
definitions, a fire, activation, the next due time); what each call sends
(:mod:`.statements`, through :mod:`.session`) and reads back."""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime
from itertools import batched
from typing import Any
from uuid import UUID

from django.db import IntegrityError, connections, models
from django.db.backends.base.base import BaseDatabaseWrapper

from millrace_django.contract import (
    TERMINAL_INSTANCE_STATES,
    BookmarkRecord,
    ClaimRequest,
    JobRecord,
    JobState,
    JobTransition,
    RecurringRecord,
    WorkflowInstanceRecord,
)
from millrace_django.errors import DuplicateJobId
from millrace_django.models import INSTANCE_STATE_CODES, INSTANCE_STATES, Recurring
from millrace_django.storage.orm import tallies
from millrace_django.storage.orm.context import Chain, Occurrence, OrmContext
from millrace_django.storage.orm.hotpath import OrmHotPath, claim_limited
from millrace_django.storage.orm.inserts import meets_holders
from millrace_django.storage.orm.postgresql.copy_format import copy_lines
from millrace_django.storage.orm.postgresql.parameters import (
    checkpoint_parameters,
    complete_parameters,
    encode_rows,
    quoted_array,
    uuid_array,
)
from millrace_django.storage.orm.postgresql.session import Driver
from millrace_django.storage.orm.postgresql.statements import (
    ACTIVATE,
    CHECKPOINT,
    CLAIM_ONE_QUEUE,
    CLAIM_QUEUES,
    CLAIMED,
    COMPLETE,
    COPY,
    DUE_HEADS,
    DUE_RECURRING,
    GET_INSTANCES,
    NOTIFY,
    PROBE_BY_INDEX,
    RECURRING_COLUMNS,
    TAKE_BOOKMARKS,
    WAKE,
    fire_statement,
    insert_statement,
)
from millrace_django.storage.orm.rows import active_scope, job_values, recurring_record
from millrace_django.storage.orm.transactions import InsertConflict

_COPY_CHUNK = 200
"""Rows sent at a time: the server reads a chunk while the next one is written."""
COPY_AT_LEAST = 500
"""Batches of this many jobs or more, claiming no idempotency scope, are copied in."""

_ACTIVE_KEY = "millrace_job_active_key"
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.I)


_RECURRING_JSON = [
    position
    for position, name in enumerate(RECURRING_COLUMNS)
    if isinstance(Recurring._meta.get_field(name), models.JSONField)
]


def _recurring_of(row: Sequence[Any]) -> RecurringRecord:
    """A definition from the columns :data:`DUE_RECURRING` reads (JSON as text)."""
    values = list(row)
    for position in _RECURRING_JSON:
        values[position] = json.loads(values[position])
    return recurring_record(Recurring.from_db(None, RECURRING_COLUMNS, values))


def _json_row(ctx: OrmContext, job: JobRecord) -> dict[str, Any]:
    """A job's row as the enqueue statements read it from JSON (NULLs left out)."""
    values = job_values(job, track_scope=ctx.track_scope)
    return {name: value for name, value in values.items() if value is not None}


def _insert_error(error: IntegrityError, jobs: Sequence[JobRecord]) -> Exception:
    """What a unique violation of an enqueue means: a holder of a key that committed
    after the statement's snapshot (replay the call: its look-up will see it), or a
    stored job id (the first the insert met, in batch order)."""
    diag = getattr(error.__cause__, "diag", None)
    unique = getattr(error.__cause__, "sqlstate", None) == "23505"
    if unique and diag is not None and diag.constraint_name != _ACTIVE_KEY:
        ids = {job.id for job in jobs}
        for found in _UUID.findall(diag.message_detail or ""):
            if UUID(found) in ids:
                return DuplicateJobId(UUID(found))
    return InsertConflict(str(error))


def _copies(jobs: Sequence[JobRecord]) -> bool:
    """Whether ``jobs`` are copied in: many, none claiming a scope (few have a key)."""
    return len(jobs) >= COPY_AT_LEAST and not any(
        active_scope(job) for job in jobs if job.idempotency_key is not None
    )


def _instance_of(instance_id: UUID, columns: Sequence[Any]) -> WorkflowInstanceRecord:
    """An instance from the columns :data:`TAKE_BOOKMARKS` and :data:`GET_INSTANCES`
    read after its id (JSON as text)."""
    definition_id, version, state, data, cursor, revision, tenant, created, updated = columns
    return WorkflowInstanceRecord(
        id=instance_id,
        definition_id=definition_id,
        definition_version=version,
        state=INSTANCE_STATES[state],
        data=None if data is None else json.loads(data),
        cursor=None if cursor is None else json.loads(cursor),
        revision=revision,
        tenant_id=tenant,
        created_at=created,
        updated_at=updated,
    )


class PostgresHotPath:
    """One statement, one round trip, per batch claim, batch acknowledgement and enqueue.

    ``several_statements``: one ``cursor.execute`` may carry several statements (client-
    side binding, Django's default). ``prepare``: hot statements are prepared once per
    session and then only executed; off where the alias says a transaction-mode pooler
    may hand us another server connection at any time (``DISABLE_SERVER_SIDE_CURSORS``,
    what Django's documentation has such deployments set), and without
    ``several_statements`` (see :class:`~.session.Driver`). A session that lost a
    statement we prepared there
    (:data:`~millrace_django.storage.orm.vendors.postgresql.LOST_PREPARED_STATEMENT`) is
    read back from the server, and the call replayed.
    """

    claim_is_one_statement = True
    activate_is_one_statement = True

    def __init__(self, *, several_statements: bool = True, prepare: bool = True) -> None:
        self.several_statements = several_statements
        self._driver = Driver(several_statements=several_statements, prepare=prepare)
        self._limited_waiting: dict[frozenset[str], bool] = {}
        """Per set of queues claimed: whether the last claim saw limited jobs waiting."""

    def complete_is_one_statement(
        self, ctx: OrmContext, transitions: Sequence[JobTransition]
    ) -> bool:
        if not any(t.activate_continuations for t in transitions):
            return True
        return ctx.notify_channel is not None and self.several_statements

    def insert_is_one_statement(self, ctx: OrmContext, jobs: Sequence[JobRecord]) -> bool:
        return ctx.notify_channel is not None and not _copies(jobs) and not meets_holders(jobs)

    # -- claim --------------------------------------------------------------------------

    def claim(self, ctx: OrmContext, request: ClaimRequest) -> list[JobRecord]:
        """Limited jobs first, in a transaction of their own, when the last claim of these
        queues saw some waiting; then the one plain statement for the room left, which
        says whether limited jobs wait; if they do and this claim has not looked yet, the
        limited claim follows at once (no poll's delay). Without limited jobs, a claim
        stays the one plain statement."""
        looked = self._limited_waiting.get(request.queues, False)
        claimed = ctx.tx.write(lambda: claim_limited(ctx, request)) if looked else []
        room = request.max_count - len(claimed)
        if not room:
            return claimed
        plain, waiting = self._claim_plain(ctx, request, room)
        self._limited_waiting[request.queues] = waiting
        claimed += plain
        room -= len(plain)
        if waiting and not looked and room:
            more = replace(request, max_count=room)
            claimed += ctx.tx.write(lambda: claim_limited(ctx, more))
        return claimed

    def _claim_plain(
        self, ctx: OrmContext, request: ClaimRequest, room: int
    ) -> tuple[list[JobRecord], bool]:
        """Up to ``room`` jobs without limits the claim statement leased (the request's
        own count is not used: a claim's limited jobs may have taken some), and whether
        jobs with limits wait in the queues."""
        now = ctx.clock.now()
        params: dict[str, Any] = {
            "limit": room,
            "now": now,
            "worker": request.worker_id,
            "until": now + request.lease,
        }
        if len(request.queues) == 1:
            (params["queue"],) = request.queues
            statement = CLAIM_ONE_QUEUE
        else:
            params["queues"] = quoted_array(sorted(request.queues))
            statement = CLAIM_QUEUES
        rows = self._driver.run(connections[ctx.alias], statement, params)
        waiting = bool(rows) and rows[-1][-1] is True
        if waiting:
            rows.pop()
        read = CLAIMED.read
        known = {
            "state": JobState.PROCESSING,
            "worker_id": request.worker_id,
            "lease_until": params["until"],
            "finished_at": None,
            "result": None,
            "started_at": now,
        }
        return [read(row, known) for row in rows], waiting

    # -- acknowledgement ----------------------------------------------------------------

    def complete(self, ctx: OrmContext, transitions: Sequence[JobTransition]) -> list[bool]:
        channel = ctx.notify_channel
        parents = [t.job_id for t in transitions if t.activate_continuations]
        if parents and channel is None:
            return OrmHotPath().complete(ctx, transitions)
        connection = connections[ctx.alias]
        params = complete_parameters(transitions, ctx.clock.now(), channel or "")
        before = "" if connection.in_atomic_block else PROBE_BY_INDEX
        wake = None
        if parents:
            params["parents"] = uuid_array(parents)
            wake = WAKE
        rows = self._driver.run(connection, COMPLETE, params, before, wake)
        won = {n for (n,) in rows}
        return [n in won for n in range(1, len(transitions) + 1)]

    def checkpoint(self, ctx: OrmContext, chains: Sequence[Chain]) -> list[bool | None]:
        connection = connections[ctx.alias]
        rows = self._driver.run(connection, CHECKPOINT, checkpoint_parameters(chains))
        answers: list[bool | None] = [False] * sum(len(chain.steps) for chain in chains)
        for n, moved in rows:
            answers[n - 1] = True if moved else None
        ended: Counter[Any] = Counter()
        first = 0
        for chain in chains:
            instance = chain.checkpoint.instance
            if answers[first] and instance.state in TERMINAL_INSTANCE_STATES:
                code = INSTANCE_STATE_CODES[instance.state]
                ended.update(
                    tallies.instance_ended(code, instance.definition_id, instance.tenant_id)
                )
            first += len(chain.steps)
        if ended:
            ctx.tx.tally(ended)
        return answers

    def get_instances(
        self, ctx: OrmContext, ids: Sequence[UUID]
    ) -> dict[UUID, WorkflowInstanceRecord] | None:
        rows = self._driver.run(connections[ctx.alias], GET_INSTANCES, {"ids": uuid_array(ids)})
        return {row[0]: _instance_of(row[0], row[1:]) for row in rows}

    def take_bookmarks(
        self, ctx: OrmContext, wanted: Sequence[tuple[str, str]]
    ) -> tuple[list[BookmarkRecord], dict[UUID, WorkflowInstanceRecord]] | None:
        params = {
            "names": quoted_array([name for name, _ in wanted]),
            "correlations": quoted_array([correlation for _, correlation in wanted]),
        }
        taken: list[BookmarkRecord] = []
        instances: dict[UUID, WorkflowInstanceRecord] = {}
        for row in self._driver.run(connections[ctx.alias], TAKE_BOOKMARKS, params):
            bookmark_id, instance_id, name, correlation, payload_type, created_at = row[:6]
            taken.append(
                BookmarkRecord(
                    id=bookmark_id,
                    instance_id=instance_id,
                    signal_name=name,
                    correlation_id=correlation,
                    payload_type=payload_type,
                    created_at=created_at,
                )
            )
            if row[6] is not None:
                instances[instance_id] = _instance_of(instance_id, row[6:])
        return taken, instances

    # -- enqueue ------------------------------------------------------------------------

    def insert(self, ctx: OrmContext, jobs: Sequence[JobRecord]) -> list[UUID] | None:
        """Insert ``jobs`` (none of them awaiting a parent) with enqueue semantics."""
        channel = ctx.notify_channel
        if channel is None or meets_holders(jobs):
            return None
        connection = connections[ctx.alias]
        try:
            if _copies(jobs) and connection.in_atomic_block:
                self._copy(ctx, connection, channel, jobs)
                return [job.id for job in jobs]
            return self._insert(ctx, connection, channel, jobs)
        except IntegrityError as error:
            raise _insert_error(error, jobs) from error

    def _insert(
        self,
        ctx: OrmContext,
        connection: BaseDatabaseWrapper,
        channel: str,
        jobs: Sequence[JobRecord],
    ) -> list[UUID]:
        effective: list[UUID | None] = []
        first_holder: dict[str, int] = {}  # scope -> position of its first job in the batch
        rows: list[dict[str, Any]] = []
        sent: list[int] = []  # batch position of each row
        queues: set[str] = set()
        for position, job in enumerate(jobs):
            scope = active_scope(job)
            if scope is not None:
                if scope in first_holder:  # the batch repeats a scope: the first holds it
                    effective.append(None)
                    continue
                first_holder[scope] = position
            rows.append(_json_row(ctx, job))
            sent.append(position)
            effective.append(job.id)
            if job.state is JobState.ENQUEUED:
                queues.add(job.queue)
        keyed = bool(first_holder)
        if keyed:  # number every row: the look-up answers by number
            for n, row in enumerate(rows):
                row["n"] = n
        statement = insert_statement(connection, keyed=keyed, scoped=ctx.track_scope)
        params = {
            "rows": encode_rows(rows),
            "channel": channel,
            "queues": quoted_array(sorted(queues)),
        }
        for n, holder in self._driver.run(connection, statement, params, read=keyed):
            if n is not None:
                effective[sent[n]] = holder
        for position, job in enumerate(jobs):
            if effective[position] is None:
                effective[position] = effective[first_holder[active_scope(job) or ""]]
        return [job_id for job_id in effective if job_id is not None]

    def _copy(
        self,
        ctx: OrmContext,
        connection: BaseDatabaseWrapper,
        channel: str,
        jobs: Sequence[JobRecord],
    ) -> None:
        queues = sorted({job.queue for job in jobs if job.state is JobState.ENQUEUED})
        with connection.cursor() as cursor:
            # First, so that it also carries the transaction's statement timeout.
            cursor.execute(NOTIFY, [channel, quoted_array(queues)])
            with connection.wrap_database_errors, cursor.cursor.copy(COPY) as copy:
                for chunk in batched(copy_lines(jobs, ctx.track_scope), _COPY_CHUNK):
                    copy.write("".join(chunk))

    # -- the scheduler's due work ------------------------------------------------------

    def activate(self, ctx: OrmContext, now: datetime, limit: int) -> int:
        """Announced in the statement, if the storage announces."""
        params = {"now": now, "limit": limit, "channel": ctx.notify_channel or ""}
        ((activated, _),) = self._driver.run(connections[ctx.alias], ACTIVATE, params)
        return int(activated)

    def due_heads(self, ctx: OrmContext, after: datetime) -> list[datetime | None]:
        """Both heads in one statement (two index probes)."""
        ((jobs, recurring),) = self._driver.run(connections[ctx.alias], DUE_HEADS, {"after": after})
        return [jobs, recurring]

    def due_recurring(self, ctx: OrmContext, now: datetime, limit: int) -> list[RecurringRecord]:
        """Read with the overlap test, as the fire will apply it."""
        params = {"now": now, "limit": limit}
        rows = self._driver.run(connections[ctx.alias], DUE_RECURRING, params)
        return [_recurring_of(row) for row in rows]

    def fire_is_one_statement(self, ctx: OrmContext, job: JobRecord) -> bool:
        """For an enqueued job without tags or a scope to hold (the others need what the
        portable insert does besides the ``INSERT``), where it can be announced."""
        return (
            ctx.notify_channel is not None
            and job.state is JobState.ENQUEUED
            and not job.tags
            and active_scope(job) is None
            and not meets_holders([job])
        )

    def fire(self, ctx: OrmContext, occurrence: Occurrence) -> bool:
        """The compare-and-set, the insert and its announcement in one statement."""
        channel = ctx.notify_channel
        job = occurrence.job
        if channel is None or not self.fire_is_one_statement(ctx, job):
            return OrmHotPath().fire(ctx, occurrence)
        connection = connections[ctx.alias]
        params = {
            "following": occurrence.next_fire_time,
            "job": job.id,
            "now": ctx.clock.now(),
            "id": occurrence.recurring_id,
            "expected": occurrence.expected,
            "rows": encode_rows([_json_row(ctx, job)]),
            "channel": channel,
        }
        try:
            return bool(self._driver.run(connection, fire_statement(connection), params))
        except IntegrityError as error:
            raise _insert_error(error, [job]) from error
