"""The two statements every job pays for: the claim and the acknowledgement.

:class:`OrmHotPath` is the portable version through the ORM; a dialect module may
provide the same two methods in fewer round trips (see :mod:`.postgresql`). Both run
inside the caller's transaction and read "now" from the context's clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from uuid import UUID

from django.db.models import F

from millrace_django.contract import (
    AttemptOutcome,
    BookmarkRecord,
    ClaimRequest,
    JobRecord,
    JobState,
    JobTransition,
    RecurringRecord,
    WorkflowInstanceRecord,
)
from millrace_django.models import Job
from millrace_django.models import JobStateCode as Code
from millrace_django.storage.orm import history, queries, tallies
from millrace_django.storage.orm.context import Chain, Occurrence, OrmContext
from millrace_django.storage.orm.continuations import activate_continuations
from millrace_django.storage.orm.inserts import insert_jobs
from millrace_django.storage.orm.limits import pick_limited
from millrace_django.storage.orm.rows import job_record
from millrace_django.storage.orm.workflows import checkpoint_many


class OrmHotPath:
    """Claim: first the jobs with limits that may start (:mod:`.limits`), then lock the
    next enqueued rows and the next expired leases without limits, skipping locked
    ones (``FOR UPDATE SKIP LOCKED``, ``READPAST`` on SQL Server, a no-op under SQLite's
    immediate transactions, which serialize writers anyway), each in claim order from
    its own partial index; lease those and the first of both for the room left (the
    others stay locked until commit). Completion: lock the fenced rows, then one
    ``UPDATE`` with per-row values."""

    claim_is_one_statement = False
    activate_is_one_statement = False

    def complete_is_one_statement(
        self, ctx: OrmContext, transitions: Sequence[JobTransition]
    ) -> bool:
        return False

    def insert_is_one_statement(self, ctx: OrmContext, jobs: Sequence[JobRecord]) -> bool:
        return False

    def insert(self, ctx: OrmContext, jobs: Sequence[JobRecord]) -> list[UUID] | None:
        return None

    def activate(self, ctx: OrmContext, now: datetime, limit: int) -> int | None:
        return None

    def due_heads(self, ctx: OrmContext, after: datetime) -> list[datetime | None] | None:
        return None

    def due_recurring(
        self, ctx: OrmContext, now: datetime, limit: int
    ) -> list[RecurringRecord] | None:
        return None

    def fire_is_one_statement(self, ctx: OrmContext, job: JobRecord) -> bool:
        return False

    def fire(self, ctx: OrmContext, occurrence: Occurrence) -> bool:
        """A compare-and-set ``UPDATE`` whose condition includes the overlap test, then
        the insert of the occurrence's job if it took."""
        fired = (
            ctx.recurring()
            .filter(
                queries.may_fire(ctx.jobs()),
                id=occurrence.recurring_id,
                enabled=True,
                next_fire_time=occurrence.expected,
            )
            .update(
                next_fire_time=occurrence.next_fire_time,
                last_fire_time=occurrence.expected,
                fired_job_id=occurrence.job.id,
                updated_at=ctx.clock.now(),
            )
        )
        if fired:
            insert_jobs(ctx, [occurrence.job])
        return bool(fired)

    def claim(self, ctx: OrmContext, request: ClaimRequest) -> list[JobRecord]:
        """The limited lane first (so a backlog of plain jobs never starves limited
        ones), then plain jobs for the room left."""
        now = ctx.clock.now()
        rows = pick_limited(ctx, request.queues, now, request.max_count)
        room = request.max_count - len(rows)
        if room:
            ready = list(queries.claim_candidates(ctx.jobs(), request.queues, now, room))
            expired = list(queries.expired_candidates(ctx.jobs(), request.queues, now, room))
            rows += sorted(ready + expired, key=lambda row: (-row.priority, row.seq))[:room]
        return lease(ctx, rows, request, now)

    def checkpoint(self, ctx: OrmContext, chains: Sequence[Chain]) -> list[bool | None]:
        steps = [t for chain in chains for t in chain.steps]
        fenced = set(queries.fenced_batch(ctx.jobs(), steps).values_list("uuid", flat=True))
        whole = [c for c in chains if all(t.job_id in fenced for t in c.steps)]
        moved = checkpoint_many(ctx, [(c.checkpoint, len(c.steps)) for c in whole])
        return [
            True
            if chain.checkpoint.instance.id in moved
            else (None if t.job_id in fenced else False)
            for chain in chains
            for t in chain.steps
        ]

    def get_instances(
        self, ctx: OrmContext, ids: Sequence[UUID]
    ) -> dict[UUID, WorkflowInstanceRecord] | None:
        return None

    def take_bookmarks(
        self, ctx: OrmContext, wanted: Sequence[tuple[str, str]]
    ) -> tuple[list[BookmarkRecord], dict[UUID, WorkflowInstanceRecord]] | None:
        return None

    def complete(self, ctx: OrmContext, transitions: Sequence[JobTransition]) -> list[bool]:
        now = ctx.clock.now()
        fenced = queries.fenced_batch(ctx.jobs(), transitions)
        found = list(
            fenced.values_list(
                "uuid", "seq", "queue", "target", "tenant_id", "started_at", "limited"
            )
        )
        matched = {uuid: seq for uuid, seq, *_ in found}
        won = {matched[t.job_id]: t for t in transitions if t.job_id in matched}
        if won:
            ctx.jobs().filter(seq__in=list(won)).update(**queries.completed(won, now))
            ended = [
                (seq, queue, target, tenant, started, won[seq].finished_at or now)
                for _, seq, queue, target, tenant, started, _ in found
            ]
            ctx.tx.enqueued({queue for _, _, queue, *_, limited in found if limited})
            ctx.tx.tally(
                tallies.jobs_ended(
                    (Code.SUCCEEDED, queue, target, tenant, finished)
                    for _, queue, target, tenant, _, finished in ended
                )
            )
            ctx.tx.tally(
                tallies.runs_ended(
                    (target, tenant, started, finished)
                    for _, _, target, tenant, started, finished in ended
                )
            )
            parents = [t.job_id for t in won.values() if t.activate_continuations]
            if parents:
                activate_continuations(ctx, parents)
        return [t.job_id in matched for t in transitions]


def claim_limited(ctx: OrmContext, request: ClaimRequest) -> list[JobRecord]:
    """The limited lane of a claim alone (see :mod:`.limits`), for a hot path whose plain
    claim is a statement of its own; run in a transaction."""
    now = ctx.clock.now()
    return lease(ctx, pick_limited(ctx, request.queues, now, request.max_count), request, now)


def lease(
    ctx: OrmContext, rows: Sequence[Job], request: ClaimRequest, now: datetime
) -> list[JobRecord]:
    """Lease the locked ``rows`` to ``request``'s worker: an expired lease among them is
    recorded as an interrupted attempt of its previous owner."""
    if not rows:
        return []
    history.record(
        ctx,
        [
            history.EndedAttempt(row.seq, row.attempt, AttemptOutcome.INTERRUPTED, row.worker_id)
            for row in rows
            if row.state == Code.PROCESSING
        ],
        now,
    )
    until = now + request.lease
    ctx.jobs().filter(seq__in=[row.seq for row in rows]).update(
        state=Code.PROCESSING,
        worker_id=request.worker_id,
        lease_until=until,
        attempt=F("attempt") + 1,
        started_at=now,
    )
    return [
        job_record(
            row,
            state=JobState.PROCESSING,
            worker_id=request.worker_id,
            lease_until=until,
            attempt=row.attempt + 1,
            started_at=now,
        )
        for row in rows
    ]
