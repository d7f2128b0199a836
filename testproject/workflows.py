"""The sample workflow: approving an order.

    reserve stock  (undone by: release stock)
    wait for the "order-approval" signal of this order (10 minutes; then: mark timed out)
    check the approval (a refusal or a time-out fails here, and the saga unwinds)
    in parallel: notify the customer | charge the payment (undone by: refund)
    then, outside the saga: close the order

Everything from the reservation to the charge is one saga: if the approval is refused
or never comes, or the charge fails, the stock is released (and a charge refunded).

The demo starts two orders (``start_demo``): ``demo-approved`` is approved by a job a
few seconds later (a signal sent from a job) and completes; ``demo-waiting`` waits for
you. Approve it (or refuse it) from a shell::

    .venv/bin/python manage.py shell -c \
        "from testproject.workflows import approve; print(approve('demo-waiting'))"

    .venv/bin/python manage.py shell -c \
        "from testproject.workflows import approve; approve('demo-waiting', approved=False)"

or from any code: ``workflows.signal("order-approval", "demo-waiting", {"approved":
True, "approver": "you"})``. ``approve`` returns whether an order was waiting.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from uuid import UUID

from millrace_django import Retry, job, workflows
from millrace_django.workflows import (
    ActivityContext,
    OnFailure,
    Parallel,
    Saga,
    Step,
    WaitForSignal,
    Workflow,
)

APPROVAL_SIGNAL = "order-approval"
APPROVAL_TIMEOUT = timedelta(minutes=10)
CHARGE_LIMIT = 10_000
"""Charges above this fail (and the saga unwinds): try ``start_order("big", 20_000)``."""


@dataclass
class Order:
    order_id: str
    amount: int
    customer: str = "customer@example.com"


@dataclass
class Approval:
    """The payload of the approval signal."""

    approved: bool
    approver: str
    note: str | None = None


class OrderRefused(Exception):
    """The approval was refused or never came: the saga unwinds."""


class PaymentDeclined(Exception):
    pass


def reserve_stock(ctx: ActivityContext) -> None:
    ctx.log(f"reserving stock for order {ctx.data['order_id']}")
    ctx.data["reservation"] = f"R-{ctx.data['order_id']}"


def release_stock(ctx: ActivityContext) -> None:
    ctx.log(f"releasing reservation {ctx.data.get('reservation')}")
    ctx.data["reservation"] = None
    ctx.data["stock_released"] = True


def mark_timed_out(ctx: ActivityContext) -> None:
    ctx.data["approval"] = {"approved": False, "approver": "nobody", "note": "timed out"}


def check_approval(ctx: ActivityContext) -> None:
    approval = ctx.data.get("approval")
    if not isinstance(approval, dict) or approval.get("approved") is not True:
        note = approval.get("note") if isinstance(approval, dict) else None
        raise OrderRefused(f"order {ctx.data['order_id']} was not approved ({note or 'refused'})")


def notify_customer(ctx: ActivityContext) -> None:
    ctx.log(f"telling {ctx.data['customer']} that order {ctx.data['order_id']} is approved")
    ctx.data["customer_notified"] = True


def charge_payment(ctx: ActivityContext) -> None:
    amount = ctx.data["amount"]
    if not isinstance(amount, int) or amount > CHARGE_LIMIT:
        raise PaymentDeclined(f"a charge of {amount} is above the limit of {CHARGE_LIMIT}")
    ctx.data["payment"] = f"P-{ctx.data['order_id']}"


def refund_payment(ctx: ActivityContext) -> None:
    ctx.log(f"refunding payment {ctx.data.get('payment')}")
    ctx.data["payment"] = None
    ctx.data["refunded"] = True


def close_order(ctx: ActivityContext) -> None:
    ctx.data["status"] = "closed"


ORDER_APPROVAL = Workflow(
    "order-approval",
    version=1,
    steps=[
        Saga(
            [
                Step(reserve_stock, compensate=release_stock),
                WaitForSignal(
                    APPROVAL_SIGNAL,
                    correlate="order_id",
                    into="approval",
                    payload=Approval,
                    timeout=APPROVAL_TIMEOUT,
                    on_timeout=[Step(mark_timed_out)],
                ),
                Step(check_approval, on_failure=OnFailure.COMPENSATE),
                Parallel(
                    [Step(notify_customer)],
                    [
                        Step(
                            charge_payment,
                            compensate=refund_payment,
                            on_failure=OnFailure.COMPENSATE,
                        )
                    ],
                ),
            ]
        ),
        Step(close_order),
    ],
)


def start_order(order_id: str, amount: int) -> UUID:
    """Start the approval of one order; returns the instance id."""
    return workflows.start(ORDER_APPROVAL, Order(order_id=order_id, amount=amount))


def approve(order_id: str, *, approved: bool = True, approver: str = "demo") -> bool:
    """Send the approval signal to the order's waiting instance; whether one waited."""
    return workflows.signal(
        APPROVAL_SIGNAL, order_id, Approval(approved=approved, approver=approver)
    )


class NotWaitingYet(Exception):
    """The order has not reached its approval step yet (a signal is not buffered)."""


@job(retry=Retry.fixed(timedelta(seconds=1), 30))
def auto_approve(order_id: str) -> None:
    """Approve an order from a job, retrying until the order waits for it."""
    if not approve(order_id, approver="the demo"):
        raise NotWaitingYet(f"order {order_id} does not wait for its approval yet")


def start_demo() -> dict[str, UUID]:
    """The demo's orders: one approved by a job shortly, one waiting for you."""
    started = {
        "demo-approved": start_order("demo-approved", 120),
        "demo-waiting": start_order("demo-waiting", 80),
    }
    auto_approve.schedule("demo-approved", delay=timedelta(seconds=2))
    return started
