"""Workflow steps acknowledged together.

A workflow step's success carries its instance's checkpoint (compare-and-set on the
revision it read), the jobs that follow and maybe new waits. One at a time that is a
savepoint and half a dozen statements per step. Here a batch of steps of distinct
instances costs a few statements in all: the fences are checked and locked at once,
each checkpoint is still set on its own revision, and the successes, new waits and next
jobs of the steps whose checkpoint held are written together. A step whose checkpoint
lost its race is left to the one-by-one path, which reports the conflict (the worker
re-plans it on the stored instance).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from django.db import IntegrityError

from millrace_django.contract import JobState, JobTransition
from millrace_django.errors import StorageError
from millrace_django.storage.orm.context import OrmContext
from millrace_django.storage.orm.inserts import insert_jobs
from millrace_django.storage.orm.rows import bookmark_row


def batchable(transitions: Sequence[JobTransition], positions: Sequence[int]) -> list[int]:
    """The positions among ``positions`` this module may acknowledge together: workflow
    successes (a checkpoint, no cancel cascade), of jobs and instances each named once."""
    named = Counter(transitions[p].job_id for p in positions)
    steps = [p for p in positions if _is_step(transitions[p]) and named[transitions[p].job_id] == 1]
    instances = Counter(transitions[p].checkpoint.instance.id for p in steps)  # type: ignore[union-attr]
    return [p for p in steps if instances[transitions[p].checkpoint.instance.id] == 1]  # type: ignore[union-attr]


def _is_step(t: JobTransition) -> bool:
    return (
        t.target is JobState.SUCCEEDED
        and t.checkpoint is not None
        and t.error is None
        and not t.unstarted
        and not t.cancel_continuations
    )


def apply_steps(ctx: OrmContext, transitions: Sequence[JobTransition]) -> list[bool | None]:
    """Inside the caller's transaction, per transition: applied (``True``), fence lost
    (``False``, nothing written), or ``None``: its instance moved on, nothing written,
    left to :func:`~millrace_django.storage.orm.transitions.apply_transition`. Whatever
    raises rolls back all of them (the caller then applies them one by one)."""
    answers = ctx.vendor.hot_path.checkpoint(ctx, transitions)
    won = [t for t, answer in zip(transitions, answers, strict=True) if answer]
    if won:
        if not all(ctx.vendor.hot_path.complete(ctx, won)):
            raise StorageError("a fence locked in this transaction no longer held")
        bookmarks = [bookmark_row(b) for t in won for b in t.bookmarks]
        if bookmarks:
            try:
                ctx.bookmarks().bulk_create(bookmarks)
            except IntegrityError as error:
                raise StorageError("a bookmark of these transitions already exists") from error
        insert_jobs(ctx, [job for t in won for job in t.enqueue])
    return answers
