"""A workflow definition's graph as inline SVG, coloured by an instance's live position.

The engine exports the graph as JSON (nodes in build order, typed edges); this lays it
out in layers, top to bottom: a node's layer is its longest distance from the start, so
every edge points down and a join sits below all of its branches.
"""

from __future__ import annotations

from collections import defaultdict, deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from millrace_django.engine.workflow import Position

NODE_WIDTH = 176
NODE_HEIGHT = 44
GAP_X = 28
GAP_Y = 46
MARGIN = 12

STATUS_ORDER = ("failed", "compensating", "running", "waiting", "done")
"""When a node is in several lists (a loop body), the first status here shows."""


@dataclass(frozen=True, slots=True)
class PlacedNode:
    id: str
    kind: str
    label: str
    status: str
    x: float
    y: float


def _n(value: float, places: int = 1) -> str:
    """A coordinate as text (``format_html`` escapes its arguments into strings)."""
    return f"{value:.{places}f}"


def node_status(node_id: str, position: Position | None) -> str:
    if position is None:
        return "idle"
    for status in STATUS_ORDER:
        if node_id in getattr(position, status):
            return status
    return "idle"


def _label(node: Mapping[str, Any]) -> str:
    kind = str(node.get("kind", ""))
    for key in ("activity", "signal", "condition", "collection"):
        if node.get(key):
            text = str(node[key])
            if key == "activity":  # "package.module:function" -> "function"
                text = text.replace(":", ".").rsplit(".", 1)[-1]
            return text if len(text) <= 26 else text[:25] + "…"
    return kind


def layout(
    graph: Mapping[str, Any], position: Position | None
) -> tuple[list[PlacedNode], float, float]:
    """Place every node; returns the nodes and the drawing's width and height."""
    nodes: Sequence[Mapping[str, Any]] = graph.get("nodes", [])
    edges: Sequence[Mapping[str, Any]] = graph.get("edges", [])
    order = {str(n["id"]): index for index, n in enumerate(nodes)}
    outgoing: dict[str, list[str]] = defaultdict(list)
    incoming = dict.fromkeys(order, 0)
    for edge in edges:
        source, target = str(edge["from"]), str(edge["to"])
        if source in order and target in order:
            outgoing[source].append(target)
            incoming[target] += 1
    # Longest path over a topological order (Kahn); nodes on a cycle, which the engine
    # never exports, are placed after the rest rather than dropped.
    depth = dict.fromkeys(order, 0)
    ready = deque(sorted((n for n, d in incoming.items() if d == 0), key=order.__getitem__))
    remaining = dict(incoming)
    visited: list[str] = []
    while ready:
        current = ready.popleft()
        visited.append(current)
        for target in outgoing[current]:
            depth[target] = max(depth[target], depth[current] + 1)
            remaining[target] -= 1
            if remaining[target] == 0:
                ready.append(target)
    deepest = max(depth.values(), default=0)
    for leftover in sorted(set(order) - set(visited), key=order.__getitem__):
        deepest += 1
        depth[leftover] = deepest
    layers: dict[int, list[str]] = defaultdict(list)
    for node_id in sorted(order, key=order.__getitem__):
        layers[depth[node_id]].append(node_id)
    widest = max((len(ids) for ids in layers.values()), default=1)
    width = MARGIN * 2 + widest * NODE_WIDTH + (widest - 1) * GAP_X
    height = MARGIN * 2 + len(layers) * NODE_HEIGHT + max(0, len(layers) - 1) * GAP_Y
    by_id = {str(n["id"]): n for n in nodes}
    placed = []
    for level, ids in sorted(layers.items()):
        row_width = len(ids) * NODE_WIDTH + (len(ids) - 1) * GAP_X
        left = (width - row_width) / 2
        for index, node_id in enumerate(ids):
            node = by_id[node_id]
            placed.append(
                PlacedNode(
                    id=node_id,
                    kind=str(node.get("kind", "")),
                    label=_label(node),
                    status=node_status(node_id, position),
                    x=left + index * (NODE_WIDTH + GAP_X),
                    y=MARGIN + level * (NODE_HEIGHT + GAP_Y),
                )
            )
    return placed, width, height


def graph_svg(graph: Mapping[str, Any], position: Position | None) -> SafeString:
    """The graph as an ``<svg>`` element, each node's status as a CSS class."""
    placed, width, height = layout(graph, position)
    where = {node.id: node for node in placed}
    lines = []
    for edge in graph.get("edges", []):
        source, target = where.get(str(edge["from"])), where.get(str(edge["to"]))
        if source is None or target is None:
            continue
        x1, y1 = source.x + NODE_WIDTH / 2, source.y + NODE_HEIGHT
        x2, y2 = target.x + NODE_WIDTH / 2, target.y
        kind = str(edge.get("kind", "next"))
        label = (
            format_html(
                '<text x="{}" y="{}" class="mr-edge-label">{}</text>',
                _n((x1 + x2) / 2 + 4),
                _n((y1 + y2) / 2),
                kind,
            )
            if kind != "next"
            else ""
        )
        lines.append(
            format_html(
                '<g class="mr-edge mr-edge-{}"><line x1="{}" y1="{}" x2="{}" '
                'y2="{}" marker-end="url(#mr-arrow)"></line>{}</g>',
                kind,
                _n(x1),
                _n(y1),
                _n(x2),
                _n(y2),
                label,
            )
        )
    boxes = [
        format_html(
            '<g class="mr-node mr-node-{}" data-node="{}"><title>{} ({}): {}</title>'
            '<rect x="{}" y="{}" width="{}" height="{}" rx="6"></rect>'
            '<text x="{}" y="{}" class="mr-node-id">{}</text>'
            '<text x="{}" y="{}" class="mr-node-kind">{} · {}</text></g>',
            node.status,
            node.id,
            node.id,
            node.kind,
            node.status,
            _n(node.x),
            _n(node.y),
            NODE_WIDTH,
            NODE_HEIGHT,
            _n(node.x + 8),
            _n(node.y + 18),
            node.id if len(node.id) <= 24 else node.id[:23] + "…",
            _n(node.x + 8),
            _n(node.y + 34),
            node.kind,
            node.label,
        )
        for node in placed
    ]
    return format_html(
        '<svg class="mr-graph" role="img" aria-label="Workflow graph" width="{}" '
        'height="{}" viewBox="0 0 {} {}"><defs><marker id="mr-arrow" '
        'viewBox="0 0 10 10" refX="10" refY="5" markerWidth="7" markerHeight="7" '
        'orient="auto-start-reverse"><path d="M 0 0 L 10 5 L 0 10 z"></path></marker></defs>'
        "{}{}</svg>",
        _n(width, 0),
        _n(height, 0),
        _n(width, 0),
        _n(height, 0),
        format_html_join("", "{}", ((line,) for line in lines)),
        format_html_join("", "{}", ((box,) for box in boxes)),
    )
