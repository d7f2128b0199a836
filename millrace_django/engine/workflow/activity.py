"""What an activity sees: the instance's data and where it runs."""

from __future__ import annotations

import asyncio
import inspect
import threading
from typing import TYPE_CHECKING, Any
from uuid import UUID

from millrace_django.contract import JSON
from millrace_django.engine.workflow.errors import WorkflowStepError

if TYPE_CHECKING:
    from millrace_django.engine.job_context import JobContext
    from millrace_django.engine.workflow.spec import Selector


class ActivityContext:
    """Passed to every activity (and compensation).

    Mutate :attr:`data` to record results; the changes are checkpointed with the job's
    success (at-least-once: a crash before that runs the activity again on the data as
    it was). ``loop_index`` is the item's index inside a :class:`ForEach` body.
    """

    def __init__(
        self,
        *,
        data: dict[str, JSON],
        instance_id: UUID,
        node_id: str,
        definition_id: str,
        version: int,
        loop_index: int | None = None,
        compensating: bool = False,
        job: JobContext | None = None,
        items: Selector | None = None,
    ) -> None:
        self.data = data
        self.instance_id = instance_id
        self.node_id = node_id
        self.definition_id = definition_id
        self.version = version
        self.loop_index = loop_index
        self.compensating = compensating
        """``True`` while running a step's compensation."""
        self.job = job
        """The underlying job's context (its id, attempt, progress and log), if any."""
        self._items = items

    @property
    def attempt(self) -> int:
        """This execution's attempt number (1 on the first run)."""
        return self.job.attempt if self.job is not None else 1

    @property
    def cancelled(self) -> threading.Event:
        """Set when the run should stop (cancel, timeout, shutdown)."""
        return self.job.cancelled if self.job is not None else threading.Event()

    @property
    def item(self) -> JSON:
        """Inside a ForEach body: the item at :attr:`loop_index` of the collection, as
        the collection reads on the current data."""
        if self._items is None or self.loop_index is None:
            raise AttributeError(f"node {self.node_id!r} does not run inside a ForEach")
        from millrace_django.engine.workflow.graph import evaluate

        collection = evaluate(self._items, self.data)
        if not isinstance(collection, list) or self.loop_index >= len(collection):
            raise WorkflowStepError(
                f"the ForEach collection no longer has an item {self.loop_index}"
            )
        item: JSON = collection[self.loop_index]
        return item

    def log(self, message: str) -> None:
        """Append a line to the job's log (shown in the dashboard)."""
        if self.job is not None:
            self.job.log(message)

    def raise_if_cancelled(self) -> None:
        if self.job is not None:
            self.job.raise_if_cancelled()

    def __repr__(self) -> str:
        return (
            f"<ActivityContext {self.definition_id} v{self.version} {self.instance_id} "
            f"node {self.node_id}>"
        )


def call_activity(activity: object, context: ActivityContext) -> None:
    """Run a function or a fresh instance of a class (``run`` or ``__call__``); a
    coroutine is run to completion."""
    target: Any = activity
    if isinstance(activity, type):
        instance = activity()
        target = getattr(instance, "run", None) or instance
    result = target(context)
    if inspect.isawaitable(result):
        asyncio.run(_awaited(result))


async def _awaited(awaitable: Any) -> None:
    await awaitable
