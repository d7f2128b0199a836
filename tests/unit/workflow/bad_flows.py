"""A workflow whose activity leaves data JSON cannot store."""

from millrace_django.engine.workflow import ActivityContext, Step, Workflow


def store_a_set(ctx: ActivityContext) -> None:
    ctx.data["bad"] = {1, 2}  # type: ignore[assignment]


BAD_DATA = Workflow("t-bad-data", steps=[Step(store_a_set)])
