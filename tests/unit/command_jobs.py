"""Jobs the command tests run (importable by the worker processes they start)."""

from __future__ import annotations

import os

from millrace_django import Retry, job

ran: list[str] = []
"""Labels of the jobs run in this process."""


@job
def record(label: str) -> str:
    ran.append(label)
    return f"{label} by {os.getpid()}"


@job(queue="emails")
def record_email(label: str) -> str:
    ran.append(label)
    return label


@job(retry=Retry.none())
def interrupt() -> None:
    """Raises ``KeyboardInterrupt`` of its own (no signal is involved)."""
    raise KeyboardInterrupt("raised by the job")
