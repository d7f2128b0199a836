"""Checkers: read the ledger, the transition journal and the jobs table once the
processes have stopped, and list every broken promise with a precise diagnosis.

For every job:

- **terminal as expected**: its state is the one the scenario expects (nothing left
  ``processing`` or waiting);
- **valid state path**: its journal starts with an insert into an insertable state and
  every step is legal (:data:`~millrace_django.contract.ALLOWED_JOB_TRANSITIONS`),
  continues from the previous one, raises ``attempt`` by exactly one per claim, changes
  it otherwise only to give an unstarted attempt back (``processing -> enqueued``, one
  less) and reclaims a lease only once it has expired; the journal ends where the row is;
- **completion recorded exactly once**: one step into a terminal state, the last;
- **every claim accounted for**: a claim given back never ran (no execution of its
  attempt started between its claim and its give-back) and leaves its number to the
  next claim; the other claims are attempts 1..n; each ends in exactly one way
  (success, failure, lease lost and reclaimed, released, poison verdict, cancellation),
  the provider's attempt history agrees (outcome and worker), and the ledger agrees (a
  success ran and finished in that attempt; a poison verdict or an unrunnable job did
  not run; no attempt ran twice; nothing ran in an attempt never claimed);
- **no overlap unless fenced**: two executions of one job overlap in time only if the
  earlier one's attempt lost its lease (the journal shows it reclaimed, so its late
  completion cannot have been recorded); a recorded result names the execution that
  produced it.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from itertools import pairwise
from typing import Any
from uuid import UUID

import psycopg

from millrace_django.contract import (
    INSERTABLE_JOB_STATES,
    TERMINAL_JOB_STATES,
    AttemptOutcome,
    JobState,
    can_transition,
)
from millrace_django.contract.attempts import oldest_kept_attempt
from millrace_django.models import ATTEMPT_OUTCOMES, JOB_STATES
from tests.reliability.harness import journal
from tests.reliability.harness.journal import Step
from tests.reliability.harness.ledger import Execution, Ledger

DETAILED_JOBS = 10
"""Jobs whose whole story a failed check prints (the rest are counted)."""


class Exit(StrEnum):
    """How one claim (attempt) of a job ended, as the journal shows it."""

    SUCCEEDED = "succeeded"
    FAILED = "failed"
    """It raised, or could not start; a failure was counted."""
    RECLAIMED = "reclaimed"
    """Its lease expired and another claim took the job."""
    RELEASED = "released"
    """Given back by its worker after it started (shutdown); no budget spent, but an
    interruption (a claim given back before it started has no exit: see
    :attr:`JobAudit.given_back`)."""
    POISON = "poison"
    """Dead without running: claimed too often without recorded failures."""
    CANCELLED = "cancelled"
    OPEN = "open"
    """Still processing."""


@dataclass(frozen=True, slots=True)
class JobRow:
    id: UUID
    target: str
    state: JobState
    attempt: int
    failures: int
    worker_id: str | None
    lease_until: datetime | None
    last_error: str | None
    result: Any
    recurring_id: str | None


@dataclass(slots=True)
class JobAudit:
    """Everything known about one job, and what the checks found wrong with it."""

    row: JobRow | None
    steps: list[Step]
    executions: list[Execution]
    history: dict[int, tuple[AttemptOutcome, str | None]]
    """The provider's attempt history: outcome and worker by attempt."""
    exits: dict[int, Exit] = field(default_factory=dict)
    """How each claim that was not given back ended, by attempt."""
    given_back: list[tuple[Step, Step]] = field(default_factory=list)
    """Each claim given back before it started, with its give-back."""
    findings: list[str] = field(default_factory=list)
    fenced_overlaps: int = 0

    def story(self) -> str:
        lines = [f"  row: {self.row}"]
        lines += [f"  journal: {step}" for step in self.steps]
        lines += [f"  ledger: {execution}" for execution in self.executions]
        history = sorted(self.history.items())
        lines += [f"  history: attempt {n} {outcome} by {w}" for n, (outcome, w) in history]
        lines += [f"  exits: {dict(sorted(self.exits.items()))}"]
        lines += [f"  given back: attempt {claim.attempt}" for claim, _ in self.given_back]
        return "\n".join(lines)


@dataclass(slots=True)
class Report:
    audits: dict[UUID, JobAudit]
    counts: Counter[str]

    @property
    def findings(self) -> list[str]:
        return [f"job {job}: {f}" for job, a in self.audits.items() for f in a.findings]

    def assert_clean(self) -> None:
        """Fail with every finding and the full story of the first few broken jobs."""
        broken = {job: audit for job, audit in self.audits.items() if audit.findings}
        if not broken:
            return
        parts = [f"{len(self.findings)} broken promises in {len(broken)} jobs ({self.summary()}):"]
        parts += self.findings[:50]
        for job, audit in list(broken.items())[:DETAILED_JOBS]:
            parts.append(f"job {job}:\n{audit.story()}")
        raise AssertionError("\n".join(parts))

    def summary(self) -> str:
        return ", ".join(f"{key} {value}" for key, value in sorted(self.counts.items()))


def check(
    url: str,
    ledger: Ledger,
    expected: Mapping[UUID, JobState],
    *,
    others: JobState | None = None,
    lease_tolerance: timedelta = timedelta(0),
) -> Report:
    """Audit every job in the database at ``url`` (and every job the ledger names).

    ``expected`` maps job ids to the terminal state each must end in; a job not in it
    must end in ``others`` (``None``: no other jobs may exist). A reclaim earlier than
    ``lease_tolerance`` before the old lease's end is a finding.
    """
    stored = rows(url)
    steps = journal.steps(url)
    history = _history(url)
    executions = ledger.executions()
    counts: Counter[str] = Counter()
    audits: dict[UUID, JobAudit] = {}
    for job_id in set(stored) | set(executions) | set(expected) | set(steps):
        audit = JobAudit(
            row=stored.get(job_id),
            steps=steps.get(job_id, []),
            executions=executions.get(job_id, []),
            history=history.get(job_id, {}),
        )
        _audit(audit, expected.get(job_id, others), lease_tolerance)
        audits[job_id] = audit
        counts["jobs"] += 1
        counts.update(f"exit {e}" for e in audit.exits.values())
        counts["given back"] += len(audit.given_back)
        counts["executions"] += len(audit.executions)
        counts["unfinished executions"] += sum(e.finished is None for e in audit.executions)
        counts["fenced overlaps"] += audit.fenced_overlaps
    return Report(audits, counts)


def _audit(audit: JobAudit, expected: JobState | None, tolerance: timedelta) -> None:
    row = audit.row
    if row is None:
        audit.findings.append("is in the ledger or journal but not in the jobs table")
        return
    if expected is None:
        audit.findings.append(f"was not expected to exist (it is {row.state})")
    elif row.state is not expected:
        where = f", worker {row.worker_id}, lease until {row.lease_until}"
        left = where if row.state is JobState.PROCESSING else ""
        audit.findings.append(
            f"ended {row.state} (attempt {row.attempt}{left}; error {row.last_error!r}), "
            f"expected {expected}"
        )
    _check_path(audit, row, tolerance)
    _account_for_claims(audit, row)
    _check_executions(audit, row)


def _check_path(audit: JobAudit, row: JobRow, tolerance: timedelta) -> None:
    steps, findings = audit.steps, audit.findings
    if not steps:
        findings.append("has no journal (was it inserted before the journal was installed?)")
        return
    first = steps[0]
    if first.source is not None or first.target not in INSERTABLE_JOB_STATES:
        findings.append(f"journal does not start with an insert: {first}")
    for previous, step in pairwise(steps):
        if step.source is not previous.target or step.old_attempt != previous.attempt:
            findings.append(f"journal skips from '{previous}' to '{step}'")
        if step.source is None:
            findings.append(f"inserted twice: {step}")
            continue
        if not can_transition(step.source, step.target):
            findings.append(f"illegal transition {step.source} -> {step.target}: {step}")
        claimed = step.target is JobState.PROCESSING
        if claimed and step.attempt != (step.old_attempt or 0) + 1:
            findings.append(f"a claim must add one to the attempt: {step}")
        if not claimed and not _gives_back(step) and step.attempt != step.old_attempt:
            findings.append(f"a non-claim changed the attempt: {step}")
        if claimed and step.source is JobState.PROCESSING:
            lease = step.old_lease
            if lease is None or step.at < lease - tolerance:
                early = "no lease" if lease is None else f"{(lease - step.at).total_seconds():.3f}s"
                findings.append(f"reclaimed before its lease ended ({early} early): {step}")
    last = steps[-1]
    if last.target is not row.state or last.attempt != row.attempt:
        findings.append(f"journal ends at '{last}' but the row is {row.state}/{row.attempt}")
    terminal = [step for step in steps if step.target in TERMINAL_JOB_STATES]
    if len(terminal) > 1 or (terminal and terminal[-1] is not last):
        findings.append(f"reached a terminal state {len(terminal)} times: {terminal}")


def _gives_back(step: Step) -> bool:
    """Whether ``step`` gives an unstarted attempt back: a release that lowers it by one."""
    return (
        step.source is JobState.PROCESSING
        and step.target is JobState.ENQUEUED
        and step.old_attempt is not None
        and step.attempt == step.old_attempt - 1
    )


def _account_for_claims(audit: JobAudit, row: JobRow) -> None:
    steps, findings = audit.steps, audit.findings
    claims: dict[int, Step] = {}  # the claims not given back, by attempt
    numbers = []
    for index, claim in enumerate(steps):
        if claim.target is not JobState.PROCESSING:
            continue
        following = steps[index + 1] if index + 1 < len(steps) else None
        if following is not None and _gives_back(following):
            audit.given_back.append((claim, following))
            continue
        numbers.append(claim.attempt)
        claims[claim.attempt] = claim
        audit.exits[claim.attempt] = _exit(claim, following)
    if numbers != list(range(1, row.attempt + 1)):
        findings.append(f"claims numbered {numbers}, but the row counts {row.attempt} attempts")
    kept_from = oldest_kept_attempt(row.attempt)
    for attempt, exit_ in audit.exits.items():
        outcome, worker = audit.history.get(attempt, (None, None))
        wanted = {
            Exit.RECLAIMED: AttemptOutcome.INTERRUPTED,
            Exit.RELEASED: AttemptOutcome.INTERRUPTED,
            Exit.FAILED: AttemptOutcome.FAILED,
        }.get(exit_)
        if attempt < kept_from:
            continue
        if outcome is not wanted:
            findings.append(f"attempt {attempt} ended {exit_} but its history row says {outcome}")
        elif outcome is not None and worker != claims[attempt].worker:
            findings.append(
                f"attempt {attempt} was claimed by {claims[attempt].worker} but its history "
                f"row names {worker}"
            )
    for attempt in set(audit.history) - set(audit.exits):
        findings.append(f"history records attempt {attempt}, which was never claimed")


def _exit(claim: Step, following: Step | None) -> Exit:
    if following is None:
        return Exit.OPEN
    target = following.target
    if target is JobState.PROCESSING:
        return Exit.RECLAIMED
    if target is JobState.ENQUEUED:
        return Exit.RELEASED
    if target is JobState.SUCCEEDED:
        return Exit.SUCCEEDED
    if target is JobState.CANCELLED:
        return Exit.CANCELLED
    if target is JobState.DEAD and following.failures == claim.failures:
        return Exit.POISON
    return Exit.FAILED


def _check_executions(audit: JobAudit, row: JobRow) -> None:
    findings, exits = audit.findings, audit.exits
    by_attempt: dict[int, list[Execution]] = {}
    for execution in audit.executions:
        by_attempt.setdefault(execution.attempt, []).append(execution)
    for attempt, runs in by_attempt.items():
        if len(runs) > 1:
            findings.append(f"attempt {attempt} ran {len(runs)} times: {[str(r) for r in runs]}")
        if attempt not in exits:
            findings.append(f"attempt {attempt} ran but was never claimed (or given back)")
    for claim, give_back in audit.given_back:
        window = (claim.at.timestamp(), give_back.at.timestamp())
        for run in by_attempt.get(claim.attempt, []):
            if window[0] <= run.started_wall <= window[1]:
                findings.append(f"attempt {claim.attempt} was given back though it ran: {run}")
    for attempt, exit_ in exits.items():
        runs = by_attempt.get(attempt, [])
        if exit_ is Exit.SUCCEEDED and not any(r.finished is not None for r in runs):
            findings.append(f"attempt {attempt} recorded a success no execution finished")
        if exit_ is Exit.POISON and runs:
            findings.append(f"attempt {attempt} got the poison verdict yet ran")
    _check_result(audit, row, by_attempt)
    ordered = sorted(audit.executions, key=lambda e: e.started)
    for index, earlier in enumerate(ordered):
        for later in ordered[index + 1 :]:
            if not earlier.overlaps(later):
                continue
            if exits.get(earlier.attempt) is Exit.RECLAIMED and later.attempt > earlier.attempt:
                audit.fenced_overlaps += 1
            else:
                findings.append(
                    f"executions overlap though the first kept its claim "
                    f"({exits.get(earlier.attempt)}): {earlier} / {later}"
                )


def _check_result(audit: JobAudit, row: JobRow, by_attempt: dict[int, list[Execution]]) -> None:
    if row.state is not JobState.SUCCEEDED or not isinstance(row.result, dict):
        return
    if set(row.result) != {"pid", "attempt"}:
        return
    finished = [r for r in by_attempt.get(row.attempt, []) if r.finished is not None]
    producer = {(r.pid, r.attempt) for r in finished}
    if (row.result["pid"], row.result["attempt"]) not in producer or row.result[
        "attempt"
    ] != row.attempt:
        audit.findings.append(
            f"recorded result {row.result} is not from the execution of the completing "
            f"attempt {row.attempt} ({[str(r) for r in finished]})"
        )


def rows(url: str) -> dict[UUID, JobRow]:
    """Every job row in the database at ``url``, by job id."""
    with psycopg.connect(url) as connection:
        rows = connection.execute(
            "SELECT uuid, target, state, attempt, failures, worker_id, lease_until,"
            " last_error, result::text, recurring_id FROM millrace_job"
        ).fetchall()
    return {
        job: JobRow(
            id=job,
            target=target,
            state=JOB_STATES[state],
            attempt=attempt,
            failures=failures,
            worker_id=worker,
            lease_until=lease,
            last_error=error,
            result=None if result is None else json.loads(result),
            recurring_id=recurring,
        )
        for job, target, state, attempt, failures, worker, lease, error, result, recurring in rows
    }


def _history(url: str) -> dict[UUID, dict[int, tuple[AttemptOutcome, str | None]]]:
    found: dict[UUID, dict[int, tuple[AttemptOutcome, str | None]]] = {}
    with psycopg.connect(url) as connection:
        rows = connection.execute(
            "SELECT j.uuid, a.attempt, a.outcome, a.worker_id FROM millrace_job_attempt AS a"
            " JOIN millrace_job AS j ON j.seq = a.job_id"
        ).fetchall()
    for job, attempt, outcome, worker in rows:
        found.setdefault(job, {})[attempt] = (ATTEMPT_OUTCOMES[outcome], worker)
    return found
