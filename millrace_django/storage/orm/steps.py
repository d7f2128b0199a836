"""Workflow steps acknowledged together.

A workflow step's success carries its instance's checkpoint (compare-and-set on the
revision it read), the jobs that follow and maybe new waits. One at a time that is a
savepoint and half a dozen statements per step. Here a batch of steps costs a few
statements in all: the fences are checked and locked at once, each instance's
checkpoint is still set on its own revision, and the successes, new waits and next jobs
of the steps whose checkpoint held are written together. Sibling steps of one instance
(a fan-out's branches, re-planned one onto another by the worker) are written as one
chain. A step whose checkpoint lost its race is left to the one-by-one path, which
reports the conflict (the worker re-plans it on the stored instance).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from uuid import UUID

from django.db import IntegrityError

from millrace_django.contract import JobState, JobTransition
from millrace_django.errors import StorageError
from millrace_django.storage.orm.context import Chain, OrmContext
from millrace_django.storage.orm.inserts import insert_jobs
from millrace_django.storage.orm.rows import bookmark_row


def chains(transitions: Sequence[JobTransition], positions: Sequence[int]) -> list[list[int]]:
    """The positions among ``positions`` this module may acknowledge together, as
    chains: workflow successes (a checkpoint, no cancel cascade) of jobs named once,
    grouped by instance in batch order, whose expected revisions follow one another. An
    instance whose steps do not (siblings that were not re-planned) is left out."""
    named = Counter(transitions[p].job_id for p in positions)
    by_instance: dict[UUID, list[int]] = {}
    for p in positions:
        t = transitions[p]
        if t.checkpoint is not None and _is_step(t) and named[t.job_id] == 1:
            by_instance.setdefault(t.checkpoint.instance.id, []).append(p)
    return [chain for chain in by_instance.values() if _consecutive(transitions, chain)]


def _consecutive(transitions: Sequence[JobTransition], chain: list[int]) -> bool:
    revisions = [transitions[p].checkpoint.expected_revision for p in chain]  # type: ignore[union-attr]
    return revisions == list(range(revisions[0], revisions[0] + len(revisions)))


def _is_step(t: JobTransition) -> bool:
    return (
        t.target is JobState.SUCCEEDED
        and t.error is None
        and not t.unstarted
        and not t.cancel_continuations
    )


def apply_steps(ctx: OrmContext, chains: Sequence[Chain]) -> list[bool | None]:
    """Inside the caller's transaction, per step (chain after chain): applied
    (``True``), fence lost (``False``, nothing written), or ``None``: nothing written,
    left to :func:`~millrace_django.storage.orm.transitions.apply_transition` (its
    instance moved on, or a fence in its chain was lost). Whatever raises rolls back all
    of them (the caller then applies them one by one)."""
    answers = ctx.hot_path.checkpoint(ctx, chains)
    steps = [t for chain in chains for t in chain.steps]
    won = [t for t, answer in zip(steps, answers, strict=True) if answer]
    if won:
        if not all(ctx.hot_path.complete(ctx, won)):
            raise StorageError("a fence locked in this transaction no longer held")
        bookmarks = [bookmark_row(b) for t in won for b in t.bookmarks]
        if bookmarks:
            try:
                ctx.bookmarks().bulk_create(bookmarks)
            except IntegrityError as error:
                raise StorageError("a bookmark of these transitions already exists") from error
        insert_jobs(ctx, [job for t in won for job in t.enqueue])
    return answers
