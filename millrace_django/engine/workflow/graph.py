"""Compiling a definition's steps into a flat, validated graph, and exporting it.

Node ids are deterministic from build order, with a counter per kind (``a1, a2, if1,
par1, each1, delay1, sig1, saga1``) unless a step names its own ``id``. Instances keep
node ids in their cursor, so changing a graph without bumping the version repoints
instances in flight: bump the version instead.

Links are static: each node's ``next`` is the node after it, arms of an ``If`` (and the
``on_timeout`` steps of a wait) lead on to the node after it, and the last node of a
parallel branch, a for-each body or a saga has ``next = None``, which at run time means
"the end of the enclosing frame" (a join, a saga commit, or the end of the workflow).
"""

from __future__ import annotations

import ast
import inspect
import types
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from enum import StrEnum
from typing import Any

from millrace_django.contract import JSON, RetrySpec
from millrace_django.engine.retry import validate_retry
from millrace_django.engine.workflow.documents import check_expected, type_name
from millrace_django.engine.workflow.errors import InvalidWorkflow, WorkflowStepError
from millrace_django.engine.workflow.spec import (
    NODE_TYPES,
    Delay,
    ForEach,
    If,
    Nested,
    Node,
    OnFailure,
    Parallel,
    Saga,
    Step,
    WaitForSignal,
)


class Kind(StrEnum):
    ACTIVITY = "activity"
    IF = "if"
    PARALLEL = "parallel"
    FOR_EACH = "for_each"
    DELAY = "delay"
    WAIT_FOR_SIGNAL = "wait_for_signal"
    SAGA = "saga"


_PREFIX = {
    Step: "a",
    If: "if",
    Parallel: "par",
    ForEach: "each",
    Delay: "delay",
    WaitForSignal: "sig",
    Saga: "saga",
}
_KIND = {
    Step: Kind.ACTIVITY,
    If: Kind.IF,
    Parallel: Kind.PARALLEL,
    ForEach: Kind.FOR_EACH,
    Delay: Kind.DELAY,
    WaitForSignal: Kind.WAIT_FOR_SIGNAL,
    Saga: Kind.SAGA,
}


@dataclass(frozen=True, slots=True, kw_only=True)
class GraphNode:
    """One compiled node; ``spec`` is the step it came from."""

    id: str
    kind: Kind
    spec: Node
    next: str | None
    frame: str | None
    """The parallel, for-each or saga node whose body holds this one (innermost)."""
    saga: str | None
    """The innermost saga around this node (through parallel and for-each bodies)."""
    when_true: str | None = None
    when_false: str | None = None
    branches: tuple[str, ...] = ()
    body: str | None = None
    on_timeout: str | None = None
    """Where a wait goes when its timeout fires (its ``on_timeout`` steps, or ``next``)."""


@dataclass(frozen=True, slots=True)
class Graph:
    start: str
    nodes: dict[str, GraphNode]
    order: tuple[str, ...] = field(default=())

    def node(self, node_id: str) -> GraphNode:
        found = self.nodes.get(node_id)
        if found is None:
            raise WorkflowStepError(
                f"node {node_id!r} is not in this workflow version's graph (was the graph "
                "changed without bumping the version?)"
            )
        return found


# -- key paths and expressions ----------------------------------------------------------


def read_path(data: JSON, path: str) -> JSON:
    """``data["a"]["b"]`` for ``"a.b"``; a missing key raises :class:`WorkflowStepError`."""
    value = data
    for part in path.split("."):
        if not isinstance(value, dict) or part not in value:
            raise WorkflowStepError(f"the data has no {path!r} (missing {part!r})")
        value = value[part]
    return value


def write_path(data: dict[str, JSON], path: str, value: JSON) -> None:
    """Set ``data["a"]["b"] = value`` for ``"a.b"``, creating objects on the way."""
    *parents, last = path.split(".")
    target = data
    for part in parents:
        child = target.get(part)
        if not isinstance(child, dict):
            child = {}
            target[part] = child
        target = child
    target[last] = value


def evaluate(expression: str | Callable[[dict[str, JSON]], object], data: dict[str, JSON]) -> Any:
    """A key path's value, or a function's result, on ``data``."""
    if isinstance(expression, str):
        return read_path(data, expression)
    try:
        return expression(data)
    except Exception as error:
        raise WorkflowStepError(
            f"{render(expression)} raised {type(error).__name__}: {error}"
        ) from error


def render(expression: object) -> str:
    """Readable text for the graph export: the key path, or the function's name (or a
    lambda's source line)."""
    if isinstance(expression, str):
        return expression
    name = getattr(expression, "__qualname__", None) or repr(expression)
    if name.endswith("<lambda>"):
        return _lambda_source(expression) or name
    module = getattr(expression, "__module__", None)
    return f"{module}.{name}" if module else name


def _lambda_source(function: object) -> str | None:
    """The text of a lambda (the first one on its line): the longest piece of source
    from ``lambda`` on that parses as a lambda."""
    try:
        source = inspect.getsource(function)  # type: ignore[arg-type]
    except (OSError, TypeError):
        return None
    start = source.find("lambda")
    if start < 0:
        return None
    text = source[start : start + 400]
    for end in range(len(text), 6, -1):
        candidate = text[:end].strip()
        try:
            tree = ast.parse(candidate, mode="eval")
        except SyntaxError:
            continue
        if isinstance(tree.body, ast.Lambda):
            return " ".join(candidate.split())
    return None


def activity_name(activity: object) -> str:
    return f"{getattr(activity, '__module__', '?')}.{getattr(activity, '__qualname__', '?')}"


# -- compiling --------------------------------------------------------------------------


@dataclass(slots=True)
class _Placed:
    spec: Node
    id: str
    children: list[list[_Placed]]


class _Compiler:
    def __init__(self, workflow: str) -> None:
        self.workflow = workflow
        self.counters: Counter[str] = Counter()
        self.nodes: dict[str, GraphNode] = {}
        self.order: list[str] = []
        self.explicit: set[str] = set()

    def fail(self, message: str) -> InvalidWorkflow:
        return InvalidWorkflow(f"workflow {self.workflow!r}: {message}")

    # pass 1: ids in build order (pre-order), and the shape checks
    def place(self, specs: Sequence[Node], where: str) -> list[_Placed]:
        if isinstance(specs, str | bytes) or not isinstance(specs, Sequence):
            raise self.fail(f"{where} must be a list of steps; got {specs!r}")
        placed = []
        for spec in specs:
            if not isinstance(spec, NODE_TYPES):
                hint = " (wrap an activity in Step(...))" if callable(spec) else ""
                raise self.fail(f"{where} holds {spec!r}, which is not a step{hint}")
            node_id = self.name(spec)
            placed.append(_Placed(spec, node_id, self.children(spec, node_id)))
        return placed

    def name(self, spec: Node) -> str:
        prefix = _PREFIX[type(spec)]
        self.counters[prefix] += 1
        automatic = f"{prefix}{self.counters[prefix]}"
        node_id = spec.id if spec.id is not None else automatic
        if not isinstance(node_id, str) or not node_id.strip() or "#" in node_id:
            raise self.fail(f"a step id must be a non-blank string without '#'; got {node_id!r}")
        if node_id in self.order:
            raise self.fail(f"two steps have the id {node_id!r}")
        self.order.append(node_id)
        return node_id

    def children(self, spec: Node, node_id: str) -> list[list[_Placed]]:
        where = f"step {node_id!r}"
        if isinstance(spec, If):
            if not spec.then:
                raise self.fail(f"{where}: If needs at least one step in then=")
            return [self.place(spec.then, f"{where} then="), self.place(spec.otherwise, where)]
        if isinstance(spec, Parallel):
            if len(spec.branches) < 2:
                raise self.fail(
                    f"{where}: Parallel needs at least two branches; got {len(spec.branches)} "
                    "(a single branch is just its steps)"
                )
            branches = []
            for number, branch in enumerate(spec.branches, 1):
                if not branch:
                    raise self.fail(f"{where}: branch {number} of Parallel has no steps")
                branches.append(self.place(branch, f"{where} branch {number}"))
            return branches
        if isinstance(spec, ForEach):
            if not spec.body:
                raise self.fail(f"{where}: ForEach needs at least one step in its body")
            return [self.place(spec.body, f"{where} body")]
        if isinstance(spec, Saga):
            if not spec.steps:
                raise self.fail(f"{where}: a Saga needs at least one step")
            return [self.place(spec.steps, f"{where} steps")]
        if isinstance(spec, WaitForSignal):
            return [self.place(spec.on_timeout, f"{where} on_timeout=")]
        return []

    # pass 2: links and the checks that need context (sagas)
    def link(
        self,
        seq: list[_Placed],
        follow: str | None,
        frame: str | None,
        saga: str | None,
    ) -> str | None:
        for position, placed in enumerate(seq):
            after = seq[position + 1].id if position + 1 < len(seq) else follow
            self.compile(placed, after, frame, saga)
        return seq[0].id if seq else follow

    def compile(self, p: _Placed, after: str | None, frame: str | None, saga: str | None) -> None:
        spec, node_id = p.spec, p.id
        where = f"step {node_id!r}"
        extra: dict[str, Any] = {}
        if isinstance(spec, Step):
            self.check_step(spec, where, saga)
        elif isinstance(spec, If):
            self.check_expression(spec.condition, f"{where}: the condition")
            extra["when_true"] = self.link(p.children[0], after, frame, saga)
            extra["when_false"] = self.link(p.children[1], after, frame, saga)
        elif isinstance(spec, Parallel):
            extra["branches"] = tuple(
                self.link(branch, None, node_id, saga) or "" for branch in p.children
            )
        elif isinstance(spec, ForEach):
            self.check_expression(spec.items, f"{where}: items=")
            extra["body"] = self.link(p.children[0], None, node_id, saga)
        elif isinstance(spec, Delay):
            if not isinstance(spec.duration, timedelta) or spec.duration <= timedelta(0):
                raise self.fail(
                    f"{where}: a Delay needs a positive timedelta; got {spec.duration!r}"
                )
        elif isinstance(spec, WaitForSignal):
            self.check_wait(spec, where)
            extra["on_timeout"] = self.link(p.children[0], after, frame, saga)
        elif isinstance(spec, Saga):
            if saga is not None and spec.nested is None:
                raise self.fail(
                    f"{where}: a saga inside saga {saga!r} must say what its commit means "
                    "to the outer one: nested=Nested.UNWIND or nested=Nested.KEEP"
                )
            if saga is None and spec.nested is not None:
                raise self.fail(f"{where}: nested= only applies to a saga inside another saga")
            if spec.nested is not None and not isinstance(spec.nested, Nested):
                raise self.fail(f"{where}: nested= must be a Nested policy; got {spec.nested!r}")
            extra["body"] = self.link(p.children[0], None, node_id, node_id)
        self.nodes[node_id] = GraphNode(
            id=node_id,
            kind=_KIND[type(spec)],
            spec=spec,
            next=after,
            frame=frame,
            saga=saga,
            **extra,
        )

    def check_step(self, spec: Step, where: str, saga: str | None) -> None:
        check_activity(spec.activity, f"{self.workflow}/{where}", self.fail)
        if spec.compensate is not None:
            if saga is None:
                raise self.fail(
                    f"{where}: compensate= outside a saga (compensation only runs when a "
                    "Saga unwinds; wrap the steps in Saga([...]))"
                )
            check_activity(spec.compensate, f"{self.workflow}/{where} compensate=", self.fail)
        if spec.on_failure is not None:
            if not isinstance(spec.on_failure, OnFailure):
                raise self.fail(
                    f"{where}: on_failure= must be an OnFailure; got {spec.on_failure!r}"
                )
            if spec.on_failure is OnFailure.COMPENSATE and saga is None:
                raise self.fail(f"{where}: on_failure=OnFailure.COMPENSATE outside a saga")
        if spec.retry is not None:
            if not isinstance(spec.retry, RetrySpec):
                raise self.fail(f"{where}: retry= must be a Retry policy; got {spec.retry!r}")
            validate_retry(spec.retry)
        if spec.timeout is not None and (
            not isinstance(spec.timeout, timedelta) or spec.timeout <= timedelta(0)
        ):
            raise self.fail(f"{where}: timeout= must be a positive timedelta; got {spec.timeout!r}")
        if spec.queue is not None and (not isinstance(spec.queue, str) or not spec.queue.strip()):
            raise self.fail(f"{where}: queue= must be a non-blank string; got {spec.queue!r}")

    def check_wait(self, spec: WaitForSignal, where: str) -> None:
        if not isinstance(spec.signal, str) or not spec.signal.strip():
            raise self.fail(f"{where}: the signal name must be a non-blank string")
        self.check_expression(spec.correlate, f"{where}: correlate=")
        if spec.into is not None and spec.bind is not None:
            raise self.fail(f"{where}: give into= or bind=, not both")
        if spec.into is not None:
            self.check_expression(spec.into, f"{where}: into=")
            if not isinstance(spec.into, str):
                raise self.fail(f"{where}: into= must be a key path")
        if spec.bind is not None and not callable(spec.bind):
            raise self.fail(f"{where}: bind= must be a function (data, payload) -> None")
        try:
            check_expected(spec.payload, where)
        except TypeError as error:
            raise self.fail(str(error)) from None
        if spec.timeout is not None and (
            not isinstance(spec.timeout, timedelta) or spec.timeout <= timedelta(0)
        ):
            raise self.fail(
                f"{where}: a signal timeout must be a positive timedelta; got {spec.timeout!r}"
            )
        if spec.on_timeout and spec.timeout is None:
            raise self.fail(f"{where}: on_timeout= steps without a timeout= never run")

    def check_expression(self, expression: object, where: str) -> None:
        if isinstance(expression, str):
            if not expression or any(not part for part in expression.split(".")):
                raise self.fail(f"{where} {expression!r} is not a key path like 'order.id'")
        elif not callable(expression):
            raise self.fail(f"{where} must be a key path or a function of the data")


def check_activity(activity: object, where: str, fail: Callable[[str], Exception]) -> None:
    """Refuse what cannot be an activity, at definition time."""
    if isinstance(activity, type):
        if "<locals>" in activity.__qualname__:
            raise fail(f"{where}: activity class {activity.__qualname__} must be module-level")
        has_call = any("__call__" in vars(base) for base in activity.__mro__[:-1])
        if not callable(getattr(activity, "run", None)) and not has_call:
            raise fail(
                f"{where}: activity class {activity.__qualname__} needs a run(context) method"
            )
        return
    if getattr(activity, "target", None) is not None and hasattr(activity, "fn"):
        raise fail(
            f"{where}: {activity!r} is a @job; an activity is a plain function taking an "
            "ActivityContext (the workflow runs it as a job itself)"
        )
    if not isinstance(activity, types.FunctionType):
        raise fail(
            f"{where}: an activity must be a module-level function or class; got {activity!r}"
        )
    if activity.__name__ == "<lambda>" or "<locals>" in activity.__qualname__:
        raise fail(
            f"{where}: activity {activity.__qualname__} must be a module-level def "
            "(lambdas and nested functions cannot be named in the graph)"
        )
    try:
        inspect.signature(activity).bind(object())
    except TypeError:
        raise fail(
            f"{where}: activity {activity.__qualname__} must take exactly one argument, the "
            "ActivityContext"
        ) from None


def compile_graph(workflow: str, steps: Sequence[Node]) -> Graph:
    """The validated, linked graph of ``steps``; raises :class:`InvalidWorkflow`."""
    compiler = _Compiler(workflow)
    if isinstance(steps, Sequence) and not isinstance(steps, str) and not steps:
        raise compiler.fail("a workflow needs at least one step")
    placed = compiler.place(steps, "steps=")
    start = compiler.link(placed, None, None, None)
    assert start is not None
    return Graph(start=start, nodes=compiler.nodes, order=tuple(compiler.order))


# -- export -----------------------------------------------------------------------------


def export(definition_id: str, version: int, graph: Graph) -> dict[str, JSON]:
    """The graph as JSON for the dashboard: nodes in build order (nulls left out) and
    typed edges (``next``, ``true``, ``false``, ``branch``, ``body``, ``timeout``, and
    ``join`` from the end of a body to where its frame carries on)."""
    nodes: list[JSON] = []
    edges: list[JSON] = []
    for node_id in graph.order:
        node = graph.nodes[node_id]
        nodes.append(_node_json(node))
        edges.extend(_edges_of(node, graph))
    return {
        "id": definition_id,
        "version": version,
        "start": graph.start,
        "nodes": nodes,
        "edges": edges,
    }


def _node_json(node: GraphNode) -> dict[str, JSON]:
    spec = node.spec
    out: dict[str, JSON] = {"id": node.id, "kind": node.kind.value, "next": node.next}
    if node.saga is not None:
        out["saga"] = node.saga
    if isinstance(spec, Step):
        out["activity"] = activity_name(spec.activity)
        if spec.compensate is not None:
            out["compensation"] = activity_name(spec.compensate)
        if spec.on_failure is not None:
            out["on_failure"] = spec.on_failure.value
        if spec.retry is not None:
            out["retry"] = {"kind": spec.retry.kind.value, "max_attempts": spec.retry.max_attempts}
        if spec.timeout is not None:
            out["timeout"] = spec.timeout.total_seconds()
        if spec.queue is not None:
            out["queue"] = spec.queue
    elif isinstance(spec, If):
        out.update(condition=render(spec.condition), when_true=node.when_true)
        out["when_false"] = node.when_false
    elif isinstance(spec, Parallel):
        out["branches"] = list(node.branches)
    elif isinstance(spec, ForEach):
        out.update(collection=render(spec.items), body=node.body)
    elif isinstance(spec, Delay):
        out["delay"] = spec.duration.total_seconds()
    elif isinstance(spec, WaitForSignal):
        out.update(signal=spec.signal, correlation=render(spec.correlate))
        if spec.payload is not None:
            out["payload_type"] = type_name(spec.payload)
        if spec.timeout is not None:
            out["timeout"] = spec.timeout.total_seconds()
            out["on_timeout"] = node.on_timeout
    elif isinstance(spec, Saga):
        out["body"] = node.body
        if spec.nested is not None:
            out["nesting"] = spec.nested.value
    return {key: value for key, value in out.items() if value is not None or key == "next"}


def _edges_of(node: GraphNode, graph: Graph) -> list[JSON]:
    found: list[tuple[str | None, str]] = []
    if node.kind is Kind.IF:
        found += [(node.when_true, "true"), (node.when_false, "false")]
    elif node.kind is Kind.PARALLEL:
        found += [(branch, "branch") for branch in node.branches]
    elif node.kind in (Kind.FOR_EACH, Kind.SAGA):
        found.append((node.body, "body"))
    else:
        if node.kind is Kind.WAIT_FOR_SIGNAL and node.on_timeout != node.next:
            found.append((node.on_timeout, "timeout"))
        found.append((node.next, "next") if node.next is not None else (_join(node, graph), "join"))
    if node.kind in (Kind.FOR_EACH, Kind.SAGA, Kind.PARALLEL):
        found.append((node.next, "next") if node.next is not None else (_join(node, graph), "join"))
    return [
        {"from": node.id, "to": target, "kind": kind}
        for target, kind in found
        if target is not None
    ]


def _join(node: GraphNode, graph: Graph) -> str | None:
    """Where the flow goes once the frame around ``node`` ends (``None``: the end)."""
    frame = node.frame
    while frame is not None:
        owner = graph.nodes[frame]
        if owner.next is not None:
            return owner.next
        frame = owner.frame
    return None
