"""The workflow ``workflow_bench.py`` drains (a module of its own, importable by name)."""

from __future__ import annotations

from millrace_django.workflows import ActivityContext, Step, Workflow


def step_one(ctx: ActivityContext) -> None:
    ctx.data["one"] = True


def step_two(ctx: ActivityContext) -> None:
    ctx.data["two"] = True


def step_three(ctx: ActivityContext) -> None:
    ctx.data["three"] = True


THREE_STEPS = Workflow(
    "bench-three-steps", steps=[Step(step_one), Step(step_two), Step(step_three)]
)
