"""Workflows the PostgreSQL integration tests run in real worker processes.

Activities append to the execution ledger (``MILLRACE_LEDGER``) with the instance, the
node and the loop index, so a test can tell how often each really ran. A step fails
while ``data["fail"]`` names it; a step is broken while the file ``<ledger>.broken-<name>``
exists (the test repairs it by deleting the file).
"""

from __future__ import annotations

import os
import time
from datetime import timedelta
from pathlib import Path

from millrace_django.workflows import (
    ActivityContext,
    Delay,
    ForEach,
    Parallel,
    Saga,
    Step,
    WaitForSignal,
    Workflow,
)
from tests.integration.ledger_jobs import LEDGER_VARIABLE


def note(ctx: ActivityContext, name: str) -> None:
    loop = "-" if ctx.loop_index is None else str(ctx.loop_index)
    line = f"{name} {ctx.instance_id} {ctx.node_id} {loop} {os.getpid()} {time.time():.6f}\n"
    descriptor = os.open(os.environ[LEDGER_VARIABLE], os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(descriptor, line.encode())
    finally:
        os.close(descriptor)
    failing = ctx.data.get("fail", {})
    if isinstance(failing, dict) and name in failing:
        raise RuntimeError(f"{name} fails, as the test asked")
    if Path(f"{os.environ[LEDGER_VARIABLE]}.broken-{name}").exists():
        raise RuntimeError(f"{name} is broken until the test repairs it")


def reserve(ctx: ActivityContext) -> None:
    note(ctx, "reserve")
    ctx.data["reserved"] = True


def release(ctx: ActivityContext) -> None:
    note(ctx, "release")
    ctx.data["released"] = True


def notify(ctx: ActivityContext) -> None:
    note(ctx, "notify")
    ctx.data["notified"] = True


def charge(ctx: ActivityContext) -> None:
    note(ctx, "charge")
    ctx.data["charged"] = True


def refund(ctx: ActivityContext) -> None:
    note(ctx, "refund")
    ctx.data["refunded"] = True


def ship(ctx: ActivityContext) -> None:
    note(ctx, "ship")
    ctx.data["shipped"] = True


def expire(ctx: ActivityContext) -> None:
    note(ctx, "expire")
    ctx.data["expired"] = True


def one(ctx: ActivityContext) -> None:
    note(ctx, "one")
    ctx.data["trail"] = [*ctx.data.get("trail", []), "one"]  # type: ignore[misc]


def two(ctx: ActivityContext) -> None:
    note(ctx, "two")
    ctx.data["trail"] = [*ctx.data.get("trail", []), "two"]  # type: ignore[misc]


def three(ctx: ActivityContext) -> None:
    note(ctx, "three")
    ctx.data["trail"] = [*ctx.data.get("trail", []), "three"]  # type: ignore[misc]


def branch(ctx: ActivityContext) -> None:
    """A fan-out branch: slow enough that a worker can be killed in the middle."""
    note(ctx, "branch")
    pause = ctx.data.get("pause", 0.0)
    assert isinstance(pause, int | float)
    time.sleep(pause)
    results = ctx.data.setdefault("results", {})
    assert isinstance(results, dict)
    results[str(ctx.loop_index)] = ctx.loop_index


def gather(ctx: ActivityContext) -> None:
    note(ctx, "gather")
    results = ctx.data.get("results", {})
    assert isinstance(results, dict)
    ctx.data["gathered"] = len(results)


LINEAR = Workflow("pg-linear", steps=[Step(one), Step(two), Step(three)])

ORDER = Workflow(
    "pg-order",
    steps=[
        Step(reserve),
        WaitForSignal(
            "approval",
            correlate="order_id",
            into="approval",
            timeout=timedelta(seconds=2),
            on_timeout=[Step(expire)],
        ),
        Parallel([Step(notify)], [Step(charge)]),
        Step(ship),
    ],
)

WAIT_ONLY = Workflow(
    "pg-wait",
    steps=[WaitForSignal("ping", correlate="key", into="ping"), Step(ship)],
)

SAGA = Workflow(
    "pg-saga",
    steps=[
        Saga(
            [
                Step(reserve, compensate=release),
                Step(charge, compensate=refund),
                Step(ship),
            ]
        )
    ],
)

DELAYED = Workflow("pg-delay", steps=[Step(one), Delay(timedelta(hours=1)), Step(two)])

FANOUT = Workflow("pg-fanout", steps=[ForEach("items", [Step(branch)]), Step(gather)])

THREE_STEPS = Workflow("pg-three-steps", steps=[Step(one), Step(two), Step(three)])
