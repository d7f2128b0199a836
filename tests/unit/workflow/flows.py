"""Module-level activities and workflow definitions for the workflow engine tests.

Activities record each call in :data:`calls`. A step fails while ``data["fail"][name]``
says so: ``"always"``, or a number of attempts. Compensations named in :data:`broken`
raise until the test repairs them.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import timedelta

from millrace_django.engine import Retry
from millrace_django.engine.workflow import (
    ActivityContext,
    Delay,
    ForEach,
    If,
    Nested,
    OnFailure,
    Parallel,
    Saga,
    Step,
    WaitForSignal,
    Workflow,
)

calls: list[str] = []
broken: set[str] = set()
_lock = threading.Lock()


def record(ctx: ActivityContext, name: str) -> None:
    label = name if ctx.loop_index is None else f"{name}[{ctx.loop_index}]"
    with _lock:
        calls.append(label)
    plan = ctx.data.get("fail", {})
    assert isinstance(plan, dict)
    failing = plan.get(name)
    if failing == "always" or (isinstance(failing, int) and ctx.attempt <= failing):
        raise RuntimeError(f"{name} failed on attempt {ctx.attempt}")
    if name in broken:
        raise RuntimeError(f"{name} is broken")


def reset() -> None:
    calls.clear()
    broken.clear()


def make(name: str):  # type: ignore[no-untyped-def]
    """Each activity below records itself and marks ``data[name] = True``."""

    def activity(ctx: ActivityContext) -> None:
        record(ctx, name)
        ctx.data[name] = True

    return activity


# Plain activities (module-level functions: the graph names them).


def first(ctx: ActivityContext) -> None:
    record(ctx, "first")
    ctx.data["trail"] = [*ctx.data.get("trail", []), "first"]  # type: ignore[misc]


def second(ctx: ActivityContext) -> None:
    record(ctx, "second")
    ctx.data["trail"] = [*ctx.data.get("trail", []), "second"]  # type: ignore[misc]


def third(ctx: ActivityContext) -> None:
    record(ctx, "third")
    ctx.data["trail"] = [*ctx.data.get("trail", []), "third"]  # type: ignore[misc]


def big(ctx: ActivityContext) -> None:
    record(ctx, "big")
    ctx.data["path"] = "big"


def small(ctx: ActivityContext) -> None:
    record(ctx, "small")
    ctx.data["path"] = "small"


def left(ctx: ActivityContext) -> None:
    record(ctx, "left")
    ctx.data["left"] = "done"


def right(ctx: ActivityContext) -> None:
    record(ctx, "right")
    ctx.data["right"] = "done"


def middle(ctx: ActivityContext) -> None:
    record(ctx, "middle")
    ctx.data["middle"] = "done"


def after(ctx: ActivityContext) -> None:
    record(ctx, "after")
    ctx.data["after"] = sorted(k for k in ("left", "right", "middle") if k in ctx.data)


def process_line(ctx: ActivityContext) -> None:
    record(ctx, "line")
    item = ctx.item
    assert isinstance(item, int)
    processed = ctx.data.setdefault("processed", {})
    assert isinstance(processed, dict)
    processed[str(ctx.loop_index)] = item * 10


def total(ctx: ActivityContext) -> None:
    record(ctx, "total")
    processed = ctx.data.get("processed", {})
    assert isinstance(processed, dict)
    ctx.data["total"] = sum(v for v in processed.values() if isinstance(v, int))


class Tally:
    """A class activity: built fresh for each run, ``run`` called."""

    def run(self, ctx: ActivityContext) -> None:
        record(ctx, "tally")
        ctx.data["tally"] = len(calls)


async def async_step(ctx: ActivityContext) -> None:
    record(ctx, "async")
    ctx.data["async"] = True


def ship(ctx: ActivityContext) -> None:
    record(ctx, "ship")
    ctx.data["shipped"] = True


def cancel_order(ctx: ActivityContext) -> None:
    record(ctx, "cancel_order")
    ctx.data["shipped"] = False


def expire(ctx: ActivityContext) -> None:
    record(ctx, "expire")
    ctx.data["expired"] = True


def flaky(ctx: ActivityContext) -> None:
    record(ctx, "flaky")
    ctx.data["flaky_attempts"] = ctx.attempt


def mutate_shared(ctx: ActivityContext) -> None:
    """Writes its own branch key and a shared counter object."""
    record(ctx, f"mutate-{ctx.data.get('who')}")


def branch_a(ctx: ActivityContext) -> None:
    record(ctx, "branch_a")
    ctx.data["a"] = 1
    nested = ctx.data.setdefault("nested", {})
    assert isinstance(nested, dict)
    nested["a"] = True
    ctx.data.pop("drop_a", None)


def branch_b(ctx: ActivityContext) -> None:
    record(ctx, "branch_b")
    ctx.data["b"] = 2
    nested = ctx.data.setdefault("nested", {})
    assert isinstance(nested, dict)
    nested["b"] = True
    ctx.data["list"] = ["b"]


# Saga activities: each do/undo pair marks data so the order is visible in `calls`.

book_hotel = make("book_hotel")
cancel_hotel = make("cancel_hotel")
book_flight = make("book_flight")
cancel_flight = make("cancel_flight")
charge_card = make("charge_card")
refund = make("refund")
inner_one = make("inner_one")
undo_inner_one = make("undo_inner_one")
inner_two = make("inner_two")
undo_inner_two = make("undo_inner_two")
outer_last = make("outer_last")
undo_outer_last = make("undo_outer_last")
plain = make("plain")


def _module_level(*functions: object) -> None:
    """``make`` builds nested functions; give them module-level names so they are
    valid activities (a real project writes each one with ``def``)."""
    for function in functions:
        for name, value in list(globals().items()):
            if value is function:
                function.__qualname__ = name  # type: ignore[attr-defined]
                function.__name__ = name  # type: ignore[attr-defined]


_module_level(
    book_hotel,
    cancel_hotel,
    book_flight,
    cancel_flight,
    charge_card,
    refund,
    inner_one,
    undo_inner_one,
    inner_two,
    undo_inner_two,
    outer_last,
    undo_outer_last,
    plain,
)


@dataclass
class Approval:
    approved: bool
    by: str
    note: str | None = None


@dataclass
class Order:
    order_id: str
    amount: int = 0


def is_big(data: dict[str, object]) -> bool:
    amount = data["amount"]
    assert isinstance(amount, int)
    return amount > 100


# -- definitions ----------------------------------------------------------------------

LINEAR = Workflow("t-linear", steps=[Step(first), Step(second), Step(third)])

BRANCHING = Workflow(
    "t-branching",
    steps=[If(is_big, then=[Step(big)], otherwise=[Step(small)]), Step(first)],
)

IF_WITHOUT_ELSE = Workflow(
    "t-if-without-else",
    steps=[If("flag", then=[Step(big)]), Step(first)],
)

FANOUT = Workflow(
    "t-fanout",
    steps=[
        Parallel([Step(left)], [Step(middle), Step(first)], [Step(right)]),
        Step(after),
    ],
)

FOR_EACH = Workflow(
    "t-for-each",
    steps=[ForEach("lines", [Step(process_line)]), Step(total)],
)

NESTED_FORKS = Workflow(
    "t-nested-forks",
    steps=[
        ForEach("lines", [Parallel([Step(process_line)], [Step(plain)])]),
        Step(total),
    ],
)

CLASSES_AND_ASYNC = Workflow("t-class-async", steps=[Step(Tally), Step(async_step)])

DELAYED = Workflow("t-delay", steps=[Step(first), Delay(timedelta(hours=1)), Step(second)])

WAIT_FIRST = Workflow(
    "t-wait-first",
    steps=[
        WaitForSignal("approval", correlate="order_id", into="approval", payload=Approval),
        If("approval.approved", then=[Step(ship)], otherwise=[Step(cancel_order)]),
    ],
)

WAIT_WITH_TIMEOUT = Workflow(
    "t-wait-timeout",
    steps=[
        Step(first),
        WaitForSignal(
            "go",
            correlate=lambda data: str(data["key"]),
            bind=lambda data, payload: data.update(go=payload),
            timeout=timedelta(minutes=30),
            on_timeout=[Step(expire)],
        ),
        Step(second),
    ],
)

PARALLEL_WAITS = Workflow(
    "t-parallel-waits",
    steps=[
        Parallel(
            [WaitForSignal("left", correlate="key", into="left")],
            [WaitForSignal("right", correlate="key", into="right")],
        ),
        Step(after),
    ],
)

TRIP = Workflow(
    "t-trip",
    steps=[
        Step(first),
        Saga(
            [
                Step(book_hotel, compensate=cancel_hotel),
                Step(book_flight, compensate=cancel_flight),
                Step(charge_card, compensate=refund),
            ]
        ),
        Step(second),
    ],
)


def nested_saga(policy: Nested, name: str) -> Workflow:
    return Workflow(
        name,
        steps=[
            Saga(
                [
                    Step(book_hotel, compensate=cancel_hotel),
                    Saga(
                        [
                            Step(inner_one, compensate=undo_inner_one),
                            Step(inner_two, compensate=undo_inner_two),
                        ],
                        nested=policy,
                    ),
                    Step(outer_last, compensate=undo_outer_last),
                ]
            )
        ],
    )


NESTED_UNWIND = nested_saga(Nested.UNWIND, "t-nested-unwind")
NESTED_KEEP = nested_saga(Nested.KEEP, "t-nested-keep")


def with_policy(policy: OnFailure, name: str) -> Workflow:
    return Workflow(
        name,
        steps=[
            Saga(
                [
                    Step(book_hotel, compensate=cancel_hotel),
                    Step(charge_card, compensate=refund, on_failure=policy),
                ]
            ),
            Step(second),
        ],
    )


POLICY_SUSPEND = with_policy(OnFailure.SUSPEND, "t-policy-suspend")
POLICY_TERMINATE = with_policy(OnFailure.TERMINATE, "t-policy-terminate")
POLICY_COMPENSATE = with_policy(OnFailure.COMPENSATE, "t-policy-compensate")

OUTSIDE_SAGA_SUSPEND = Workflow(
    "t-suspend-outside", steps=[Step(first, on_failure=OnFailure.SUSPEND), Step(second)]
)

RETRIED = Workflow(
    "t-retried",
    steps=[Step(flaky, retry=Retry.fixed(timedelta(seconds=10), 3)), Step(second)],
)

VERSIONED_1 = Workflow("t-versioned", version=1, steps=[Step(first)])
VERSIONED_2 = Workflow("t-versioned", version=2, steps=[Step(second), Step(third)])

MERGING = Workflow(
    "t-merging",
    steps=[Parallel([Step(branch_a)], [Step(branch_b)]), Step(after)],
)

SAGA_IN_PARALLEL = Workflow(
    "t-saga-in-parallel",
    steps=[
        Parallel(
            [
                Saga(
                    [
                        Step(book_hotel, compensate=cancel_hotel),
                        Step(charge_card, compensate=refund),
                    ]
                )
            ],
            [Step(plain)],
        ),
        Step(after),
    ],
)

EMPTY_START = Workflow("t-empty-start", steps=[ForEach("lines", [Step(process_line)])])

WAIT_AND_FAIL = Workflow(
    "t-wait-and-fail",
    steps=[Parallel([WaitForSignal("never", correlate="key")], [Step(plain)])],
)

MANY_WAITS = Workflow(
    "t-many-waits",
    steps=[
        WaitForSignal("ping", correlate="key", into="ping", timeout=timedelta(minutes=5)),
        Step(plain),
    ],
)

FANOUT_20 = Workflow("t-fanout-20", steps=[ForEach("lines", [Step(process_line)]), Step(total)])
