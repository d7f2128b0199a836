"""Jobs the hard-timeout tests run in child processes (importable there by name)."""

from __future__ import annotations

import os
import signal
import time

from millrace_django.engine import JobContext, job


@job
def hang(seconds: float) -> None:
    """Sleep far past any limit the tests set (a stuck job)."""
    time.sleep(seconds)


@job
def hang_deaf_to_sigterm(seconds: float) -> None:
    """A stuck job that ignores SIGTERM: only SIGKILL ends it."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    time.sleep(seconds)


@job
def report_and_return(n: int, context: JobContext) -> dict[str, int]:
    """Report progress and a log line, then return where it ran."""
    context.report_progress(0.5)
    context.log(f"half of {n}")
    return {"pid": os.getpid(), "n": n}


@job
async def async_pid() -> int:
    return os.getpid()


@job
def refuse(amount: int) -> None:
    raise ValueError(f"refused amount {amount}")


@job
def until_cancelled(context: JobContext) -> str:
    """Stop cooperatively once the worker's cancellation reaches the child."""
    if not context.cancelled.wait(30):
        return "never cancelled"
    return "stopped"


@job
def unstorable() -> object:
    return {1, 2}


@job(hard_timeout=7)
def nightly() -> None:
    """A recurring job whose occurrences take the decorator's hard timeout."""


@job
def checkpoint_then_fail(context: JobContext) -> object:
    """First attempt: checkpoints its pid, then fails; later ones return what they read."""
    if context.last_checkpoint is None:
        context.checkpoint({"pid": os.getpid()})
        raise RuntimeError("fails after its checkpoint")
    return context.last_checkpoint
