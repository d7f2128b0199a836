"""What a Django task's attempts leave behind, and how a ``TaskResult`` reads it back.

Millrace keeps counters on the job row and a history row only for attempts that ended
badly, which is not enough for ``TaskResult.worker_ids`` (one per attempt, successes
too), ``started_at`` or ``last_attempted_at``. So the task runner writes one line to the
job's log as each attempt starts (fenced by the claim, before the task function runs),
and one more when the function raises, naming the exception class. Both are plain
sentences, readable on the dashboard; :func:`read_log` parses them back.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from django.tasks import TaskResultStatus
from django.tasks.base import TaskError

from millrace_django.contract import AttemptOutcome, JobAttempt, JobLogLine, JobState

_STARTED = re.compile(r"^Django task attempt (?P<attempt>\d+) started on worker (?P<worker>.+)$")
_RAISED = re.compile(r"^Django task attempt (?P<attempt>\d+) raised (?P<path>\S+)$")
_EXCEPTION_LINE = re.compile(r"^(?P<path>[A-Za-z_][\w.]*)(?::|$)")

TIMED_OUT_PATH = "millrace_django.engine.errors.JobTimedOut"
CANCELLED_PATH = "millrace_django.engine.errors.JobCancelled"
UNKNOWN_PATH = "builtins.Exception"

STATUSES: dict[JobState, TaskResultStatus] = {
    JobState.SCHEDULED: TaskResultStatus.READY,
    JobState.ENQUEUED: TaskResultStatus.READY,
    JobState.AWAITING: TaskResultStatus.READY,
    JobState.FAILED: TaskResultStatus.READY,  # a retry is waiting for its turn
    JobState.PROCESSING: TaskResultStatus.RUNNING,
    JobState.SUCCEEDED: TaskResultStatus.SUCCESSFUL,
    JobState.DEAD: TaskResultStatus.FAILED,
    JobState.CANCELLED: TaskResultStatus.FAILED,
}
"""Millrace's job states onto Django's four statuses."""


def started_line(attempt: int, worker_id: str) -> str:
    return f"Django task attempt {attempt} started on worker {worker_id}"


def raised_line(attempt: int, exception_class_path: str) -> str:
    return f"Django task attempt {attempt} raised {exception_class_path}"


def class_path(kind: type[BaseException]) -> str:
    """How Django names an exception class in ``TaskError.exception_class_path``."""
    return f"{kind.__module__}.{kind.__qualname__}"


@dataclass(frozen=True, slots=True)
class Start:
    attempt: int
    worker_id: str
    at: datetime


@dataclass(frozen=True, slots=True)
class AttemptLog:
    """The attempts a job's log tells of: starts in order, raised classes by attempt."""

    starts: tuple[Start, ...]
    raised: dict[int, str]


def read_log(lines: Iterable[JobLogLine]) -> AttemptLog:
    starts: list[Start] = []
    raised: dict[int, str] = {}
    for line in lines:
        if started := _STARTED.match(line.message):
            starts.append(Start(int(started["attempt"]), started["worker"], line.at))
        elif failed := _RAISED.match(line.message):
            raised[int(failed["attempt"])] = failed["path"]
    return AttemptLog(tuple(starts), raised)


def task_errors(
    state: JobState,
    attempts: Sequence[JobAttempt],
    last_error: str | None,
    raised: dict[int, str],
) -> list[TaskError]:
    """One ``TaskError`` per failed attempt still in the history (oldest first), plus
    the verdict that ended a job without a failed attempt (cancelled, poison pill).

    ``attempts`` is the history as the storage returns it: newest first, capped.
    Interrupted attempts (a crash, a lost lease, a shutdown) are not failures and leave
    no error, though they count in ``worker_ids``.
    """
    failed = [a for a in reversed(attempts) if a.outcome is AttemptOutcome.FAILED]
    errors = [
        TaskError(
            exception_class_path=raised.get(a.attempt) or guess_class_path(a.error or ""),
            traceback=a.error or "",
        )
        for a in failed
    ]
    if state is JobState.CANCELLED:
        errors.append(
            TaskError(exception_class_path=CANCELLED_PATH, traceback=last_error or "Cancelled.")
        )
    elif state is JobState.DEAD and last_error and (not failed or failed[-1].error != last_error):
        errors.append(
            TaskError(exception_class_path=guess_class_path(last_error), traceback=last_error)
        )
    return errors


def guess_class_path(text: str) -> str:
    """The exception class named by a stored error, for attempts whose runner could not
    say (a timeout fires while the function still runs): the last line of a formatted
    traceback starts with the class (``builtins`` left out, as Python prints it)."""
    if text.startswith("Timed out after "):
        return TIMED_OUT_PATH
    for line in reversed(text.splitlines()):
        if not line.strip() or line[0].isspace():
            continue
        found = _EXCEPTION_LINE.match(line)
        if found is None:
            break
        path = found["path"]
        if not path.rpartition(".")[2][:1].isupper():
            break
        return path if "." in path else f"builtins.{path}"
    return UNKNOWN_PATH
