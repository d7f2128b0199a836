"""``TaskResult.errors`` from Millrace's attempt history: one ``TaskError`` per failed
attempt, named by the class the runner saw raised, else by the stored traceback."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from django.tasks.base import TaskError

from millrace_django.contract import AttemptOutcome, JobAttempt, JobState

_EXCEPTION_LINE = re.compile(r"^(?P<path>[A-Za-z_][\w.]*)(?::|$)")

TIMED_OUT_PATH = "millrace_django.engine.errors.JobTimedOut"
CANCELLED_PATH = "millrace_django.engine.errors.JobCancelled"
UNKNOWN_PATH = "builtins.Exception"


def class_path(kind: type[BaseException]) -> str:
    """How Django names an exception class in ``TaskError.exception_class_path``."""
    return f"{kind.__module__}.{kind.__qualname__}"


def task_errors(
    state: JobState,
    attempts: Sequence[JobAttempt],
    last_error: str | None,
    raised: Mapping[int, str],
) -> list[TaskError]:
    """One ``TaskError`` per failed attempt still in the history (oldest first), plus
    the verdict that ended a job without a failed attempt (cancelled, poison pill).

    ``attempts`` is the history as the storage returns it: newest first, capped;
    ``raised`` the class paths the runner recorded, by attempt number. Interrupted
    attempts (a crash, a lost lease, a shutdown) are not failures and leave no error,
    though they count in ``worker_ids``.
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
