"""One job of every shape, for the demo. Each is a module-level function, as jobs must be.

``enqueue_samples`` in ``samples.py`` creates one of each; ``manage.py
millrace_demo_enqueue`` calls it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import timedelta
from uuid import UUID

from django.db.models import F

from millrace_django import JobContext, Retry, job, jobs
from testproject.sample.models import Account

logger = logging.getLogger(__name__)


@job
def say_hello(name: str) -> str:
    """Fire-and-forget: runs as soon as a worker is free."""
    logger.info("hello, %s", name)
    return f"hello, {name}"


@job(queue="emails")
def send_reminder(user_id: int) -> str:
    """Delayed: scheduled a few seconds ahead."""
    return f"reminded user {user_id}"


@job
def tick() -> str:
    """Recurring: a cron definition fires it every minute."""
    return "tick"


@job(tags=["billing"])
def build_invoice(order_id: str) -> dict[str, str]:
    """The first step of a continuation; tagged, like ``email_invoice``: the jobs list
    filters by tag (``?tag=billing``)."""
    return {"order": order_id, "invoice": f"INV-{order_id}"}


@job(queue="emails", tags=["billing", "email"])
def email_invoice(order_id: str) -> str:
    """Continuation: runs only after ``build_invoice`` succeeded."""
    return f"invoice for order {order_id} sent"


@job(queue="reports")
def resize_image(image: str, width: int) -> str:
    """Batch: several of these are stored all together or not at all."""
    return f"{image} resized to {width}px"


@job(retry=Retry.fixed(timedelta(seconds=1), max_attempts=3))
def flaky_sync(account: str, context: JobContext) -> str:
    """Retry then success: the first attempt fails, the retry a second later succeeds."""
    if context.attempt < 2:
        raise ConnectionError(f"the partner API timed out for {account}")
    return f"{account} synced on attempt {context.attempt}"


@job(retry=Retry.fixed(timedelta(seconds=1), max_attempts=2))
def import_broken_file(path: str) -> None:
    """Failure to dead: fails every time; dead after its two attempts."""
    raise ValueError(f"{path}: line 1: not a CSV file")


@job(concurrency=1, rate="5/s", limit_key="customer_id")
def sync_customer(customer_id: str) -> str:
    """Limited: one sync per customer at a time, five starts a second, across every
    worker (the queues page lists the limit with its running and waiting jobs)."""
    time.sleep(0.5)
    return f"customer {customer_id} synced"


@job(queue="reports")
def long_report(seconds: float, context: JobContext) -> str:
    """Cancellable long job: reports progress and stops when its cancellation fires."""
    started = time.monotonic()
    steps = max(1, int(seconds * 4))
    for step in range(steps):
        context.report_progress(step / steps)
        if context.cancelled.wait(seconds / steps):
            elapsed = time.monotonic() - started
            context.log(f"stopping after {elapsed:.1f}s: {context.cancel_reason}")
            context.raise_if_cancelled()
    return "report ready"


@job
def cancel_job(job_id: str) -> bool:
    """Asks for ``job_id`` to be cancelled (the demo uses it on ``long_report``)."""
    return jobs.cancel(UUID(job_id))


@job
async def fetch_rates(currency: str) -> dict[str, float]:
    """Async: runs on the worker's event loop."""
    await asyncio.sleep(0.2)
    return {currency: 1.0}


@job(atomic=True)
def transfer(source: str, target: str, cents: int) -> dict[str, int]:
    """Atomic: both balances and the job's success commit together, or none does, so
    the money moves once however often a worker dies mid-job (docs/exactly-once.md)."""
    Account.objects.filter(name=source).update(balance=F("balance") - cents)
    Account.objects.filter(name=target).update(balance=F("balance") + cents)
    return dict(Account.objects.filter(name__in=(source, target)).values_list("name", "balance"))


@job
def noop() -> None:
    """Does nothing (benchmarks and smoke tests)."""
