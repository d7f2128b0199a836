"""Jobs for the worker-process tests. Each writes to an execution ledger outside the
database (an append-only file named by ``MILLRACE_LEDGER``), so the tests can count how
often a job really started and finished, whatever the jobs table says."""

from __future__ import annotations

import os
import time

from millrace_django import JobContext, job

LEDGER_VARIABLE = "MILLRACE_LEDGER"


def write(event: str, context: JobContext) -> None:
    """Append one line; a single small ``O_APPEND`` write, so lines never interleave."""
    line = f"{event} {context.job_id} {context.attempt} {os.getpid()} {time.time():.6f}\n"
    descriptor = os.open(os.environ[LEDGER_VARIABLE], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(descriptor, line.encode())
    finally:
        os.close(descriptor)


@job
def record(pause: float, context: JobContext) -> None:
    """Finish after ``pause`` seconds."""
    time.sleep(pause)
    write("done", context)


@job
def hold(seconds: float, context: JobContext) -> None:
    """Run for ``seconds``, deaf to cancellation (as a stuck job would be)."""
    write("start", context)
    time.sleep(seconds)
    write("done", context)


@job
def count_to(total: int, pause: float, context: JobContext) -> int:
    """Count to ``total``, one step per ``pause`` seconds, checkpointing each step and
    resuming from the last checkpoint; the ledger says where each attempt resumed
    (``resumed-N``) and which checkpoints were stored (``saved-N``). Returns where it
    resumed."""
    start = context.last_checkpoint or 0
    assert isinstance(start, int)
    write(f"resumed-{start}", context)
    for step in range(start + 1, total + 1):
        time.sleep(pause)
        if context.checkpoint(step):
            write(f"saved-{step}", context)
    return start
