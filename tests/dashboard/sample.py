"""The dashboard tests' world: module-level jobs and workflows, and a seed with one job
in every state, a recurring definition, and workflow instances waiting and suspended."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from uuid import UUID

from millrace_django import JobContext, Retry, job, tenant
from millrace_django.clock import FakeClock
from millrace_django.contract import ClaimRequest, JobState
from millrace_django.engine.workflow import (
    ActivityContext,
    OnFailure,
    Step,
    WaitForSignal,
    Workflow,
)
from millrace_django.testing import JobRunner

WORKER = "worker-7@host-a"


@job(queue="emails")
def send_welcome(user_id: int, *, plan: str = "free") -> dict[str, object]:
    return {"sent": True, "user": user_id, "plan": plan}


@job(retry=Retry.none())
def import_orders(path: str) -> None:
    raise ValueError(f"{path}: line 3: not a CSV file")


@job(retry=Retry.fixed(timedelta(hours=1), max_attempts=3))
def sync_partner(account: str) -> None:
    raise ConnectionError(f"the partner API timed out for {account}")


@job(queue="reports")
def build_report(month: str, context: JobContext) -> str:
    context.report_progress(0.5)
    context.log(f"read the orders of {month}")
    context.log("wrote 42 rows")
    context.checkpoint({"rows_written": 42})
    context.report_progress(1.0)
    return f"report {month} ready"


@job
def nightly_cleanup() -> int:
    return 0


def reserve_stock(ctx: ActivityContext) -> None:
    ctx.data["reserved"] = True


def ship_order(ctx: ActivityContext) -> None:
    ctx.data["shipped"] = True


def charge_card(ctx: ActivityContext) -> None:
    raise RuntimeError("card declined: insufficient funds")


ORDER_FLOW = Workflow(
    "dash-order",
    steps=[
        Step(reserve_stock),
        WaitForSignal("approved", correlate="order_id", into="approval"),
        Step(ship_order),
    ],
)

PAYMENT_FLOW = Workflow(
    "dash-payment",
    steps=[Step(charge_card, on_failure=OnFailure.SUSPEND), Step(ship_order)],
    retry=Retry.none(),
)


@dataclass(frozen=True, slots=True)
class World:
    succeeded: UUID
    dead: UUID
    failed: UUID
    report: UUID
    enqueued: UUID
    scheduled: UUID
    processing: UUID
    parent: UUID
    awaiting: UUID
    tenanted: UUID
    recurring_id: str
    fired: UUID
    waiting_instance: UUID
    suspended_instance: UUID
    order_id: str


def runner_now() -> JobRunner:
    """An ORM runner whose fake clock starts an hour ago (the dashboard reads real time)."""
    clock = FakeClock(datetime.now(UTC).replace(microsecond=0) - timedelta(hours=1))
    return JobRunner.for_project(storage="orm", clock=clock)


def seed(runner: JobRunner) -> World:
    client = runner.client
    succeeded = client.enqueue(send_welcome, 42, plan="pro")
    dead = client.enqueue(import_orders, "uploads/orders.xlsx")
    failed = client.enqueue(sync_partner, "acme-gmbh")
    report = client.enqueue(build_report, "2026-10")
    client.upsert_recurring(
        "nightly-cleanup", nightly_cleanup, cron="0 3 * * *", timezone="Europe/Paris"
    )
    client.trigger_recurring("nightly-cleanup")
    order_id = "order-1001"
    waiting = runner.workflows.start(ORDER_FLOW, {"order_id": order_id})
    suspended = runner.workflows.start(PAYMENT_FLOW, {"order_id": "order-1002"})
    runner.run_until_idle(throw_on_failure=False)
    runner.advance(timedelta(seconds=5))
    processing = client.enqueue(send_welcome, 7)
    [claimed] = runner.storage.claim(
        ClaimRequest(
            worker_id=WORKER, queues=frozenset({"emails"}), max_count=1, lease=timedelta(hours=1)
        )
    )
    assert claimed.id == processing
    runner.advance(timedelta(seconds=5))
    enqueued = client.enqueue(build_report, "2026-11")
    scheduled = client.schedule(send_welcome, 9, delay=timedelta(hours=2))
    parent = client.schedule(build_report, "2026-12", delay=timedelta(hours=3))
    awaiting = client.continue_with(parent, send_welcome, 10)
    with tenant("acme"):
        tenanted = client.enqueue(send_welcome, 11)
    fired = next(j for j in runner.jobs() if j.recurring_id == "nightly-cleanup").id
    world = World(
        succeeded=succeeded,
        dead=dead,
        failed=failed,
        report=report,
        enqueued=enqueued,
        scheduled=scheduled,
        processing=processing,
        parent=parent,
        awaiting=awaiting,
        tenanted=tenanted,
        recurring_id="nightly-cleanup",
        fired=fired,
        waiting_instance=waiting,
        suspended_instance=suspended,
        order_id=order_id,
    )
    for job_id, state in [
        (succeeded, JobState.SUCCEEDED),
        (dead, JobState.DEAD),
        (failed, JobState.FAILED),
        (report, JobState.SUCCEEDED),
        (processing, JobState.PROCESSING),
        (enqueued, JobState.ENQUEUED),
        (scheduled, JobState.SCHEDULED),
        (awaiting, JobState.AWAITING),
    ]:
        runner.assert_state(job_id, state)
    return world
