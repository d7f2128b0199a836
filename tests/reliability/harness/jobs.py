"""The workload: job functions that write the execution ledger as they run.

Each returns ``{"pid": ..., "attempt": ...}`` of the execution that produced it, so the
checkers can tell which execution's completion the database recorded.
"""

from __future__ import annotations

import os
import signal
import time

from millrace_django import JobContext, job
from tests.reliability.harness.ledger import append


@job
def work(seconds: float, context: JobContext) -> dict[str, int]:
    """Run for ``seconds``, deaf to cancellation (as a busy or stuck job would be)."""
    append("start", context.job_id, context.attempt)
    time.sleep(seconds)
    append("finish", context.job_id, context.attempt)
    return {"pid": os.getpid(), "attempt": context.attempt}


@job
def crash(context: JobContext) -> None:
    """A poison pill: kills its own worker process, every time it runs."""
    append("start", context.job_id, context.attempt)
    os.kill(os.getpid(), signal.SIGKILL)
