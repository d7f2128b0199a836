"""A worker's fenced transition and every side effect it carries, in one transaction."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.db import IntegrityError

from millrace_django.contract import (
    TERMINAL_JOB_STATES,
    JobState,
    JobTransition,
    attempt_after,
    outcome_of,
    transition_problem,
)
from millrace_django.errors import StorageError
from millrace_django.models import JOB_STATE_CODES
from millrace_django.storage.orm import history, queries, tallies, workflows
from millrace_django.storage.orm.context import OrmContext
from millrace_django.storage.orm.continuations import (
    activate_continuations,
    cancel_awaiting_closure,
)
from millrace_django.storage.orm.inserts import insert_jobs
from millrace_django.storage.orm.rows import bookmark_row


def is_plain_success(t: JobTransition) -> bool:
    """A success that only moves its own row (and maybe wakes its continuations): what
    a hot path may acknowledge set-based."""
    return (
        t.target is JobState.SUCCEEDED
        and t.error is None
        and t.checkpoint is None
        and not t.enqueue
        and not t.bookmarks
        and not t.cancel_continuations
        and not t.unstarted  # refused by the generic path
    )


def apply_transition(ctx: OrmContext, t: JobTransition) -> bool:
    """Apply ``t`` inside the caller's transaction. The fence is checked first (a row
    lock on the job); anything raised afterwards rolls the whole transition back."""
    row = queries.fenced(ctx.jobs(), t).first()
    if row is None:
        return False
    problem = transition_problem(t)
    if problem is not None:
        raise StorageError(problem)
    now = ctx.clock.now()
    outcome = outcome_of(t, row.failures)
    if outcome is not None:
        error = t.error if t.target is not JobState.ENQUEUED else None
        history.record(
            ctx, [history.EndedAttempt(row.seq, row.attempt, outcome, row.worker_id, error)], now
        )
    fields = moved(t, now)
    ctx.jobs().filter(seq=row.seq).update(**fields)
    if t.target in TERMINAL_JOB_STATES:
        ended = (fields["state"], row.queue, row.target, row.tenant_id, fields["finished_at"])
        ctx.tx.tally(tallies.jobs_ended([ended]))
    if t.target is JobState.SUCCEEDED:
        run = (row.target, row.tenant_id, row.started_at, fields["finished_at"])
        ctx.tx.tally(tallies.runs_ended([run]))
    if t.target is JobState.ENQUEUED or row.limited:
        ctx.tx.enqueued([row.queue])  # claimable again, or a limit's slot freed
    if t.checkpoint is not None:
        workflows.checkpoint(ctx, t.checkpoint.instance, t.checkpoint.expected_revision)
    if t.bookmarks:
        try:
            ctx.bookmarks().bulk_create([bookmark_row(b) for b in t.bookmarks])
        except IntegrityError as error:
            raise StorageError("a bookmark of this transition already exists") from error
    if t.enqueue:
        insert_jobs(ctx, t.enqueue)
    if t.activate_continuations:
        activate_continuations(ctx, [t.job_id])
    if t.cancel_continuations:
        cancel_awaiting_closure(ctx, t.job_id, now)
    return True


def moved(t: JobTransition, now: datetime) -> dict[str, Any]:
    """The job's columns after ``t``: its target state and the fields that implies."""
    fields: dict[str, Any] = {
        "state": JOB_STATE_CODES[t.target],
        "worker_id": None,
        "lease_until": None,
        "failures": t.failures,
    }
    if t.error is not None:
        fields["last_error"] = t.error
    if t.target is JobState.FAILED:
        if t.due_at is None:
            raise StorageError("a failed transition needs the retry's due_at")
        fields["due_at"] = t.due_at
    elif t.target is JobState.ENQUEUED:
        fields["due_at"] = None
        fields["attempt"] = attempt_after(t)
    else:
        fields["finished_at"] = t.finished_at or now
        fields["result"] = t.result if t.target is JobState.SUCCEEDED else None
        fields["key_scope"] = None
    return fields
