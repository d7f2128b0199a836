"""What a transition does to a job's attempts, shared by every provider: which
transitions are refused, the attempt a job keeps, and which executions leave an
attempt-history row.

Only executions that ended badly are recorded: a failure, or an interruption (a release,
or a lease that expired and was reclaimed). Success, cancellation, the poison-pill
verdict and a given-back attempt that never started write nothing. History is capped;
the counters on the job row never are.
"""

from __future__ import annotations

from millrace_django.contract.monitoring import ATTEMPT_HISTORY_CAP, AttemptOutcome
from millrace_django.contract.records import JobTransition
from millrace_django.contract.states import TRANSITION_TARGETS, JobState


def transition_problem(transition: JobTransition) -> str | None:
    """Why a provider must refuse ``transition`` (a contract violation), if it must."""
    if transition.target not in TRANSITION_TARGETS:
        return f"{transition.target.value!r} is not a transition target"
    if transition.unstarted and transition.target is not JobState.ENQUEUED:
        return f"only a release gives an attempt back, not a {transition.target.value!r} one"
    return None


def attempt_after(transition: JobTransition) -> int:
    """The job's ``attempt`` once ``transition`` is applied: the claim's, unless the
    attempt never started and is given back."""
    return transition.expected_attempt - 1 if transition.unstarted else transition.expected_attempt


def outcome_of(transition: JobTransition, prior_failures: int) -> AttemptOutcome | None:
    """The history row a transition writes, given the job's failures before it."""
    if transition.target is JobState.FAILED:
        return AttemptOutcome.FAILED
    if transition.target is JobState.DEAD and transition.failures > prior_failures:
        return AttemptOutcome.FAILED
    if transition.target is JobState.ENQUEUED and not transition.unstarted:
        return AttemptOutcome.INTERRUPTED
    return None


def oldest_kept_attempt(current_attempt: int) -> int:
    """Rows for attempts below this number are pruned in the same transaction."""
    return current_attempt - ATTEMPT_HISTORY_CAP + 1
