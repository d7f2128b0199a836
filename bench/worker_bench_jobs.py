"""The jobs ``worker_bench.py`` runs (a module of their own, importable by target)."""

from __future__ import annotations

import threading
import time
from uuid import UUID

from millrace_django import JobContext, job

_lock = threading.Lock()
started: dict[UUID, float] = {}
"""``perf_counter()`` at the start of each ``stamp`` job, by job id."""


@job
def noop() -> None:
    """Does nothing: the bench measures the worker, not the job."""


@job
def stamp(context: JobContext) -> None:
    """Notes when it started (the pickup-latency probe)."""
    now = time.perf_counter()
    with _lock:
        started[context.job_id] = now
