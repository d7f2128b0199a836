"""Server-side drawings: the workflow graph's layout and the charts (pure functions)."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

from millrace_django.contract import InstanceState
from millrace_django.dashboard.charts import state_bars, throughput_chart
from millrace_django.dashboard.graphview import graph_svg, layout
from millrace_django.dashboard.services import ThroughputPoint
from millrace_django.engine.workflow import Position

FORK = {
    "start": "a",
    "nodes": [
        {"id": "a", "kind": "activity", "next": "p", "activity": "pkg.mod:first"},
        {"id": "p", "kind": "parallel", "next": "z", "branches": ["b1", "c1"]},
        {"id": "b1", "kind": "activity", "next": "b2", "activity": "pkg.mod:left"},
        {"id": "b2", "kind": "activity", "next": None, "activity": "pkg.mod:left_again"},
        {"id": "c1", "kind": "activity", "next": None, "activity": "pkg.mod:right"},
        {"id": "z", "kind": "activity", "next": None, "activity": "pkg.mod:<b>&after"},
    ],
    "edges": [
        {"from": "a", "to": "p", "kind": "next"},
        {"from": "p", "to": "b1", "kind": "branch"},
        {"from": "p", "to": "c1", "kind": "branch"},
        {"from": "b1", "to": "b2", "kind": "next"},
        {"from": "b2", "to": "z", "kind": "join"},
        {"from": "c1", "to": "z", "kind": "join"},
        {"from": "p", "to": "z", "kind": "next"},
    ],
}


def test_a_join_is_laid_out_below_its_longest_branch():
    placed, width, height = layout(FORK, None)
    y = {node.id: node.y for node in placed}
    assert y["a"] < y["p"] < y["b1"] == y["c1"] < y["b2"] < y["z"]
    assert width > 0 and height > y["z"]


def test_nodes_take_the_instance_position_as_their_status():
    position = Position(
        state=InstanceState.RUNNING, done=("a", "p", "b1"), running=("b2",), waiting=("c1",)
    )
    svg = str(graph_svg(FORK, position))
    found = re.findall(r'class="mr-node mr-node-(\w+)" data-node="(\w+)"', svg)
    assert {node: status for status, node in found} == {
        "a": "done", "p": "done", "b1": "done", "b2": "running", "c1": "waiting", "z": "idle",
    }  # fmt: skip
    assert ">branch<" in svg and ">join<" in svg


def test_labels_are_escaped_and_shortened():
    svg = str(graph_svg(FORK, None))
    assert "&lt;b&gt;&amp;after" in svg and "<b>" not in svg
    assert "activity · first" in svg


def test_a_cycle_never_drops_a_node():
    looped = {
        "nodes": [{"id": "x", "kind": "activity"}, {"id": "y", "kind": "activity"}],
        "edges": [{"from": "x", "to": "y"}, {"from": "y", "to": "x"}],
    }
    assert {node.id for node in layout(looped, None)[0]} == {"x", "y"}


def test_state_bars_scale_to_the_largest_count():
    svg = str(state_bars({"succeeded": 10, "dead": 5, "cancelled": 0}, {"dead": "#c00"}))
    widths = [int(w) for w in re.findall(r'<rect x="100" y="[\d.]+" width="(\d+)"', svg)]
    assert widths == [200, 100, 0]
    assert "#c00" in svg


def test_the_throughput_chart_stacks_failures_on_successes():
    start = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
    points = [
        ThroughputPoint(start=start + timedelta(minutes=n), succeeded=n, failed=n % 2)
        for n in range(5)
    ]
    svg = str(throughput_chart(points))
    assert svg.count("<g><title>") == 5
    assert "12:04: 4 succeeded, 0 failed" in svg
    assert "No finished jobs" in str(throughput_chart([]))
