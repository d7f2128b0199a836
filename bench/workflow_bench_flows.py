"""The workflows ``workflow_bench.py`` drains (a module of its own, importable by name):
its worker processes import the definitions from here on demand."""

from __future__ import annotations

from millrace_django.workflows import ActivityContext, Parallel, Step, WaitForSignal, Workflow

FAN_OUT_BRANCHES = 10
SIGNAL_NAME = "bench-go"


def step_one(ctx: ActivityContext) -> None:
    ctx.data["one"] = True


def step_two(ctx: ActivityContext) -> None:
    ctx.data["two"] = True


def step_three(ctx: ActivityContext) -> None:
    ctx.data["three"] = True


def noop(ctx: ActivityContext) -> None:
    """Does nothing (a branch of the fan-out, the step after a signal)."""


THREE_STEPS = Workflow(
    "bench-three-steps", steps=[Step(step_one), Step(step_two), Step(step_three)]
)
FAN_OUT = Workflow(
    "bench-fan-out",
    steps=[Parallel(*([Step(noop, id=f"branch-{n}")] for n in range(FAN_OUT_BRANCHES)))],
)
"""Ten no-op steps at once, joined: the instance completes when all ten have."""
SIGNAL_ROUND_TRIP = Workflow(
    "bench-signal", steps=[WaitForSignal(SIGNAL_NAME, correlate="key"), Step(noop)]
)
"""Waits for ``bench-go`` correlated by its ``key``, then one no-op step."""
