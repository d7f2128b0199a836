"""Errors the engine raises on purpose.

Mistakes a caller can fix (bad arguments, bad cron, unknown queue) subclass the built-in
``TypeError``/``ValueError`` they resemble, so ordinary ``except ValueError`` code works;
every one also subclasses :class:`~millrace_django.errors.MillraceError`.
"""

from __future__ import annotations

from datetime import timedelta
from uuid import UUID

from millrace_django.errors import MillraceError


class InvalidJobDefinition(MillraceError, TypeError):
    """``@job`` was applied to something a worker could not find again by import."""


class InvalidJobArguments(MillraceError, TypeError):
    """The arguments do not fit the job function's signature; nothing was written."""


class UnserializableArgument(InvalidJobArguments):
    """An argument would not survive the trip through JSON unchanged; nothing was written."""

    def __init__(self, target: str, argument: str, problem: str) -> None:
        super().__init__(f"cannot enqueue {target}: argument {argument!r} {problem}")
        self.target = target
        self.argument = argument


class ArgumentsTooLarge(MillraceError, ValueError):
    """The arguments' JSON is over the configured limit; nothing was written."""

    def __init__(self, target: str, size: int, limit: int) -> None:
        super().__init__(
            f"cannot enqueue {target}: its arguments take {size} bytes as JSON, over the "
            f"limit of {limit} bytes (MILLRACE['MAX_ARGUMENTS_BYTES']); store large data "
            "elsewhere (a file, a model row) and pass its key"
        )
        self.target = target
        self.size = size
        self.limit = limit


class InvalidRetry(MillraceError, ValueError):
    """A retry policy with impossible numbers (no attempts, negative delays)."""


class InvalidCron(MillraceError, ValueError):
    """A cron expression that cannot be parsed or never fires."""


class UnknownTimezone(InvalidCron):
    """A time zone name the zone database does not know."""


class InvalidSchedule(MillraceError, ValueError):
    """A due time the engine refuses: negative delay, naive datetime, both or neither."""


class UnknownQueue(MillraceError, ValueError):
    """A queue no node is configured to claim from; such a job would wait forever."""

    def __init__(self, queue: str, known: frozenset[str]) -> None:
        names = ", ".join(sorted(known)) or "none"
        super().__init__(f"queue {queue!r} is not configured (configured queues: {names})")
        self.queue = queue


class DuplicateIdempotencyKey(MillraceError, ValueError):
    """Two items of one batch share a (tenant, idempotency key); nothing was written."""


class JobNotFinished(MillraceError):
    """Requeue was asked for a job that can still run (the dashboard answers 409)."""

    def __init__(self, job_id: UUID, state: str) -> None:
        super().__init__(
            f"job {job_id} is {state}; only succeeded, dead or cancelled jobs can be "
            "requeued (use run_now to retry a failed job now)"
        )
        self.job_id = job_id
        self.state = state


class NotConfigured(MillraceError):
    """``fn.enqueue()`` was called before the app wired a default client."""


class UnrunnableJob(MillraceError):
    """A stored job the worker cannot even start; it is declared dead without a retry."""


class UnresolvableTarget(UnrunnableJob):
    """The stored target no longer imports to a ``@job`` function."""


class InvalidStoredArguments(UnrunnableJob):
    """The stored arguments no longer fit the job function."""


class JobCancelled(MillraceError):
    """Raised by ``context.raise_if_cancelled()`` once the job's cancellation fired."""


class JobTimedOut(MillraceError):
    """A job ran past its timeout; recorded as an ordinary failure."""

    def __init__(self, timeout: timedelta) -> None:
        super().__init__(f"Timed out after {describe_duration(timeout)}.")
        self.timeout = timeout


class HardTimeoutExceeded(JobTimedOut):
    """A job's child process was killed at its hard timeout; recorded as a failure."""

    def __init__(self, timeout: timedelta) -> None:
        MillraceError.__init__(
            self, f"Killed after its hard timeout of {describe_duration(timeout)}."
        )
        self.timeout = timeout


class FailedInChild(MillraceError):
    """How a job's attempt in its child process (hard timeout) failed, as the worker
    learns it: the error text and the raised exception's class names (the exception
    itself need not survive pickling); ``None`` when it raised nothing (its result could
    not be stored, or the process died), which the retry filters leave alone."""

    def __init__(self, text: str, class_names: tuple[str, ...] | None) -> None:
        super().__init__(text)
        self.text = text
        self.class_names = class_names


def describe_duration(span: timedelta) -> str:
    """``timedelta(minutes=2)`` -> ``"120 seconds"``: the unit operators think in."""
    seconds = span.total_seconds()
    text = f"{seconds:.3f}".rstrip("0").rstrip(".")
    return f"{text} second" if text == "1" else f"{text} seconds"


class AtomicJobRefused(MillraceError, TypeError):
    """An atomic job (``@job(atomic=True)``) cannot run atomically here: its storage
    cannot join a transaction (the memory provider), or it was given a hard timeout.
    Nothing was written."""
