"""Module-level jobs the observability tests run."""

from __future__ import annotations

import logging
from datetime import timedelta

from opentelemetry import trace

from millrace_django.engine import Retry, job

user_logger = logging.getLogger("tests.observability.user_code")
seen_spans: list[tuple[int, int]] = []
"""``(trace id, span id)`` of the span current inside :func:`note_span`."""


@job
def chatty(label: str) -> str:
    user_logger.info("working on %s", label)
    return label


@job
async def async_chatty(label: str) -> str:
    user_logger.info("awaiting on %s", label)
    return label


@job(retry=Retry.fixed(timedelta(seconds=10), 3))
def wobbly() -> None:
    raise RuntimeError("not yet")


@job(retry=Retry.none())
def doomed() -> None:
    raise ValueError("never works")


@job
def note_span() -> None:
    context = trace.get_current_span().get_span_context()
    seen_spans.append((context.trace_id, context.span_id))


@job(retry=Retry.none(), failure_observers=[chatty])
def doomed_and_observed() -> None:
    raise ValueError("never works, and says so")
