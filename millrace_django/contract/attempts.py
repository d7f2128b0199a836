"""Which executions leave an attempt-history row, shared by every provider.

Only executions that ended badly are recorded: a failure, or an interruption (a release,
or a lease that expired and was reclaimed). Success, cancellation and the poison-pill
verdict write nothing. History is capped; the counters on the job row never are.
"""

from __future__ import annotations

from millrace_django.contract.monitoring import ATTEMPT_HISTORY_CAP, AttemptOutcome
from millrace_django.contract.records import JobTransition
from millrace_django.contract.states import JobState


def outcome_of(transition: JobTransition, prior_failures: int) -> AttemptOutcome | None:
    """The history row a transition writes, given the job's failures before it."""
    if transition.target is JobState.FAILED:
        return AttemptOutcome.FAILED
    if transition.target is JobState.DEAD and transition.failures > prior_failures:
        return AttemptOutcome.FAILED
    if transition.target is JobState.ENQUEUED:
        return AttemptOutcome.INTERRUPTED
    return None


def oldest_kept_attempt(current_attempt: int) -> int:
    """Rows for attempts below this number are pruned in the same transaction."""
    return current_attempt - ATTEMPT_HISTORY_CAP + 1
