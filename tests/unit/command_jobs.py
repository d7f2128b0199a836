"""Jobs the command tests run (importable by the worker processes they start)."""

from __future__ import annotations

import os
from datetime import timedelta

from django.db import connections

from millrace_django import JobContext, Retry, job

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


@job(retry=Retry.fixed(timedelta(milliseconds=300), 2))
def fails_once(label: str, context: JobContext) -> str:
    """Fails its first attempt; its retry is due 300 ms later."""
    ran.append(label)
    if context.attempt == 1:
        raise RuntimeError("the first attempt fails")
    return label


@job
def touch_database(alias: str) -> None:
    """Opens the job thread's connection to ``alias`` (Django's rules close it, or not)."""
    connections[alias].ensure_connection()
    ran.append(alias)
