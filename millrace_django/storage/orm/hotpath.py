"""The two statements every job pays for: the claim and the acknowledgement.

:class:`OrmHotPath` is the portable version through the ORM; a dialect module may
provide the same two methods in fewer round trips (see :mod:`.postgresql`). Both run
inside the caller's transaction and read "now" from the context's clock.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from functools import reduce
from typing import Any, Protocol

from django.db.models import Case, DateTimeField, F, IntegerField, JSONField, Q, Value, When

from millrace_django.contract import (
    AttemptOutcome,
    ClaimRequest,
    JobRecord,
    JobState,
    JobTransition,
)
from millrace_django.models import JobStateCode as Code
from millrace_django.storage.orm import history
from millrace_django.storage.orm.context import OrmContext
from millrace_django.storage.orm.rows import job_record


class HotPath(Protocol):
    def claim(self, ctx: OrmContext, request: ClaimRequest) -> list[JobRecord]:
        """Lease up to ``request.max_count`` claimable jobs (see ``JobStorage.claim``)."""
        ...

    def complete(self, ctx: OrmContext, transitions: Sequence[JobTransition]) -> list[bool]:
        """Apply plain ``succeeded`` transitions of distinct jobs (no inserts, checkpoint,
        bookmarks, error or cancel cascade) set-based, each fenced on its own."""
        ...


def claimable(now: Any) -> Q:
    """Enqueued, or processing under a lease that has run out by ``now``."""
    return Q(state=Code.ENQUEUED) | Q(state=Code.PROCESSING, lease_until__lte=now)


class OrmHotPath:
    """Claim: lock the next rows skipping locked ones (``FOR UPDATE SKIP LOCKED``,
    ``READPAST`` on SQL Server, a no-op under SQLite's immediate transactions, which
    serialize writers anyway), then lease them. Completion: lock the fenced rows, then
    one ``UPDATE`` with per-row values."""

    def claim(self, ctx: OrmContext, request: ClaimRequest) -> list[JobRecord]:
        now = ctx.clock.now()
        rows = list(
            ctx.jobs()
            .select_for_update(skip_locked=True)
            .filter(claimable(now), queue__in=sorted(request.queues))
            .order_by("-priority", "seq")[: request.max_count]
        )
        if not rows:
            return []
        history.record(
            ctx,
            [
                history.EndedAttempt(
                    row.seq, row.attempt, AttemptOutcome.INTERRUPTED, row.worker_id
                )
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
        )
        return [
            job_record(
                row,
                state=JobState.PROCESSING,
                worker_id=request.worker_id,
                lease_until=until,
                attempt=row.attempt + 1,
            )
            for row in rows
        ]

    def complete(self, ctx: OrmContext, transitions: Sequence[JobTransition]) -> list[bool]:
        now = ctx.clock.now()
        fence = reduce(
            operator.or_,
            (
                Q(uuid=t.job_id, worker_id=t.expected_worker_id, attempt=t.expected_attempt)
                for t in transitions
            ),
        )
        matched = dict(
            ctx.jobs()
            .select_for_update()
            .filter(fence, state=Code.PROCESSING)
            .values_list("uuid", "seq")
        )
        won = {matched[t.job_id]: t for t in transitions if t.job_id in matched}
        if won:
            ctx.jobs().filter(seq__in=list(won)).update(
                state=Code.SUCCEEDED,
                worker_id=None,
                lease_until=None,
                key_scope=None,
                failures=_per_row(won, lambda t: t.failures, IntegerField()),
                finished_at=_per_row(won, lambda t: t.finished_at or now, DateTimeField()),
                result=_per_row(won, lambda t: t.result, JSONField()),
            )
            parents = [t.job_id for t in won.values() if t.activate_continuations]
            if parents:
                ctx.jobs().filter(parent_id__in=parents, state=Code.AWAITING).update(
                    state=Code.ENQUEUED, due_at=None
                )
        return [t.job_id in matched for t in transitions]


def _per_row(won: dict[int, JobTransition], value: Any, field: Any) -> Case:
    whens = [When(seq=seq, then=Value(value(t), output_field=field)) for seq, t in won.items()]
    return Case(*whens, output_field=field)
