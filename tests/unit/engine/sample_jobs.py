"""Module-level jobs the engine tests enqueue, resolve and run."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import Any

from millrace_django.engine import JobContext, Retry, current_tenant, job

calls: list[tuple[str, Any]] = []
"""What the jobs below saw when they ran (tests clear it)."""


@job
def send_confirmation(order_id: str) -> None:
    calls.append(("send_confirmation", order_id))


@job
def notify_ops(dead_job_id: str) -> None:
    calls.append(("notify_ops", dead_job_id))


@job(
    queue="emails",
    priority=5,
    retry=Retry.fixed(timedelta(seconds=30), 3),
    timeout=timedelta(minutes=2),
    failure_observers=[notify_ops, "tests.unit.engine.sample_jobs:audit"],
)
def send_invoice(order_id: str, *, copies: int = 1) -> str:
    return f"invoice {order_id} x{copies}"


@job(queue="emails")
def audit(dead_job_id: str) -> None:
    calls.append(("audit", dead_job_id))


@job
def add(a: int, b: int) -> int:
    return a + b


@job
def spread(first: Any, *rest: Any, **options: Any) -> dict[str, Any]:
    return {"first": first, "rest": list(rest), "options": options}


@job
def with_context(label: str, context: JobContext) -> dict[str, Any]:
    context.log(f"working on {label}")
    context.report_progress(0.5)
    return {"job_id": str(context.job_id), "attempt": context.attempt, "tenant": context.tenant}


@job
async def async_add(a: int, b: int) -> int:
    return a + b


@job
async def async_tenant(context: JobContext) -> list[str | None]:
    return [current_tenant(), context.tenant]


@job
def whose_tenant() -> str | None:
    return current_tenant()


@job
def explode(message: str) -> None:
    raise RuntimeError(message)


@job
async def async_interrupt() -> None:
    await asyncio.sleep(0)
    raise KeyboardInterrupt("raised by the job")


def not_a_job(order_id: str) -> None:
    """A plain function sitting where a job was expected."""
