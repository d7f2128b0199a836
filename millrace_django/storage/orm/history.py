"""Attempt history: a row per execution that ended badly, the newest few per job.

Which executions leave a row is the contract's rule (:mod:`millrace_django.contract.attempts`);
this module writes them, inside the caller's transaction, and prunes the oldest.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import reduce

from django.db import connections
from django.db.models import Q

from millrace_django.contract import AttemptOutcome, oldest_kept_attempt
from millrace_django.models import ATTEMPT_OUTCOME_CODES, JobAttempt
from millrace_django.storage.orm.context import OrmContext


@dataclass(frozen=True, slots=True)
class EndedAttempt:
    """An execution to record: the job row's ``seq`` and the attempt as it ran."""

    job_seq: int
    attempt: int
    outcome: AttemptOutcome
    worker_id: str | None
    error: str | None = None


def record(ctx: OrmContext, ended: Sequence[EndedAttempt], at: datetime) -> None:
    """Insert each row unless that attempt is already recorded, then prune."""
    if not ended:
        return
    rows = [
        JobAttempt(
            job_id=e.job_seq,
            attempt=e.attempt,
            outcome=ATTEMPT_OUTCOME_CODES[e.outcome],
            recorded_at=at,
            worker_id=e.worker_id,
            error=e.error,
        )
        for e in ended
    ]
    features = connections[ctx.alias].features
    ctx.attempts().bulk_create(rows, ignore_conflicts=features.supports_ignore_conflicts)
    pruned = [
        Q(job_id=e.job_seq, attempt__lt=oldest_kept_attempt(e.attempt))
        for e in ended
        if oldest_kept_attempt(e.attempt) > 1
    ]
    if pruned:
        ctx.attempts().filter(reduce(operator.or_, pruned)).delete()
