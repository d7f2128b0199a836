"""Continuations: a job's ``awaiting`` children, enqueued when it succeeds and cancelled,
with the awaiting subtrees below them, when it ends otherwise (or its instance is
cancelled)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from uuid import UUID

from millrace_django.models import JobStateCode as Code
from millrace_django.storage.orm import queries, tallies
from millrace_django.storage.orm.context import OrmContext


def activate_continuations(ctx: OrmContext, parents: Sequence[UUID]) -> None:
    """Enqueue the ``awaiting`` continuations of ``parents`` and note their queues for
    the wake-up hint (a second statement only when there are some)."""
    woken = list(queries.awaiting_children(ctx.jobs(), parents))
    if woken:
        ctx.jobs().filter(seq__in=[seq for seq, _ in woken]).update(
            state=Code.ENQUEUED, due_at=None
        )
        ctx.tx.enqueued(queue for _, queue in woken)


def cancel_awaiting_closure(ctx: OrmContext, parent_id: UUID, now: datetime) -> None:
    """Cancel every ``awaiting`` descendant reachable through ``awaiting`` children; an
    activated child shields its own subtree."""
    frontier = [parent_id]
    while frontier:
        children = list(
            ctx.jobs()
            .select_for_update()
            .filter(parent_id__in=frontier, state=Code.AWAITING)
            .values_list("uuid", "queue", "target", "tenant_id")
        )
        frontier = [uuid for uuid, *_ in children]
        if children:
            ctx.jobs().filter(uuid__in=frontier).update(
                state=Code.CANCELLED, finished_at=now, key_scope=None
            )
            ctx.tx.tally(
                tallies.jobs_ended((Code.CANCELLED, *group, now) for _, *group in children)
            )
