"""The builder vocabulary: what a workflow definition is made of.

A definition is a list of steps; each is one of the node classes below. They are plain,
frozen values: build a graph from them once, at import, and
:class:`~millrace_django.engine.workflow.definition.Workflow` validates and compiles it::

    Workflow("order-approval", version=1, steps=[
        Step(reserve),
        WaitForSignal("approval", correlate="order_id", into="approval",
                      timeout=timedelta(hours=1)),
        If(is_approved, then=[Parallel([Step(notify)], [Step(charge)])],
           otherwise=[Step(release)]),
    ])

Activities are module-level functions (or classes with a ``run`` method or
``__call__``, built without arguments for each execution) taking an
:class:`~millrace_django.engine.workflow.activity.ActivityContext`. Conditions,
collections and correlations are key paths into the data (``"order.id"``) or pure
functions of the data: they may be evaluated more than once.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import KW_ONLY, dataclass
from datetime import timedelta
from enum import StrEnum
from typing import Any

from millrace_django.contract import JSON, RetrySpec

type Data = dict[str, JSON]
type Activity = Callable[..., Any] | type
"""A module-level function taking an ActivityContext, or a class whose instances have a
``run(context)`` method (or are callable)."""
type KeyPath = str
type Predicate = KeyPath | Callable[[Data], object]
type Selector = KeyPath | Callable[[Data], object]


class OnFailure(StrEnum):
    """What a step's failure does once its retry policy is spent."""

    RETRY = "retry"
    """The default: retry per the step's policy; then unwind the enclosing saga (outside a
    saga: the instance fails)."""
    COMPENSATE = "compensate"
    """Unwind the enclosing saga at the first failure, without retries."""
    SUSPEND = "suspend"
    """Suspend the instance, nothing undone, for an operator to retry, skip or abandon."""
    TERMINATE = "terminate"
    """The instance fails; work done so far stands (no compensation)."""


class Nested(StrEnum):
    """What a nested saga's completed steps mean to the enclosing saga once it commits."""

    UNWIND = "unwind"
    """They join the outer saga's undo stack: an outer unwind compensates them too."""
    KEEP = "keep"
    """They are final once the inner saga commits."""


class Recovery(StrEnum):
    """An operator's answer to a suspended instance (a failed compensation, or a step
    whose policy is ``SUSPEND``)."""

    RETRY = "retry"
    """Run the failed activity again, with a fresh retry budget."""
    SKIP = "skip"
    """Treat it as done without running it, and carry on."""
    ABANDON = "abandon"
    """Give up: the instance fails; what is done stays done."""


@dataclass(frozen=True, slots=True)
class Step:
    """Run ``activity`` as a job. Inside a :class:`Saga`, ``compensate`` undoes it."""

    activity: Activity
    _: KW_ONLY
    compensate: Activity | None = None
    on_failure: OnFailure | None = None
    retry: RetrySpec | None = None
    """This step's retry policy (default: the workflow's, else the project's)."""
    timeout: timedelta | None = None
    queue: str | None = None
    id: str | None = None


@dataclass(frozen=True, slots=True)
class If:
    """Route on ``condition`` (truthy: ``then``, else ``otherwise``); spends no job."""

    condition: Predicate
    then: Sequence[Node]
    otherwise: Sequence[Node] = ()
    _: KW_ONLY
    id: str | None = None


@dataclass(frozen=True, slots=True, init=False)
class Parallel:
    """Run every branch at once; continue when all have finished (at least two)."""

    branches: tuple[Sequence[Node], ...]
    id: str | None

    def __init__(self, *branches: Sequence[Node], id: str | None = None) -> None:
        object.__setattr__(self, "branches", tuple(branches))
        object.__setattr__(self, "id", id)


@dataclass(frozen=True, slots=True)
class ForEach:
    """Run ``body`` once per item of the list ``items`` selects, all at once; the body
    sees the item's index (``context.loop_index``). An empty list skips the body."""

    items: Selector
    body: Sequence[Node]
    _: KW_ONLY
    id: str | None = None


@dataclass(frozen=True, slots=True)
class Delay:
    """A durable timer: carry on after ``duration``."""

    duration: timedelta
    _: KW_ONLY
    id: str | None = None


@dataclass(frozen=True, slots=True)
class WaitForSignal:
    """Wait (holding no job) for ``signal`` correlated by ``correlate`` (a string from
    the data).

    The payload is checked against ``payload`` (a dataclass, ``dict`` for any JSON
    object, or ``None`` for any JSON value) and stored at key ``into`` of the data, or
    applied by ``bind(data, payload)``. After ``timeout`` without a signal, the
    ``on_timeout`` steps run instead (then the flow carries on after this step).
    """

    signal: str
    _: KW_ONLY
    correlate: Selector
    into: KeyPath | None = None
    bind: Callable[[Data, JSON], None] | None = None
    payload: type | None = None
    timeout: timedelta | None = None
    on_timeout: Sequence[Node] = ()
    id: str | None = None


@dataclass(frozen=True, slots=True)
class Saga:
    """Steps that succeed together or are compensated newest-first. A saga inside a
    saga must say what its commit means to the outer one (``nested``)."""

    steps: Sequence[Node]
    _: KW_ONLY
    nested: Nested | None = None
    id: str | None = None


type Node = Step | If | Parallel | ForEach | Delay | WaitForSignal | Saga

NODE_TYPES: tuple[type, ...] = (Step, If, Parallel, ForEach, Delay, WaitForSignal, Saga)
