"""Definitions: validated when built, registered by (id, version), exported as a graph."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest

from millrace_django.engine.workflow import (
    Delay,
    ForEach,
    If,
    InvalidWorkflow,
    Nested,
    OnFailure,
    Parallel,
    Saga,
    Step,
    UnknownWorkflow,
    WaitForSignal,
    Workflow,
    find,
    unregister,
)
from tests.unit.workflow import flows
from tests.unit.workflow.flows import first, second, third


@pytest.fixture
def built() -> Iterator[list[Workflow]]:
    """Workflows a test builds are forgotten after it."""
    made: list[Workflow] = []
    yield made
    for workflow in made:
        unregister(workflow)


def build(built: list[Workflow], *args: object, **kwargs: object) -> Workflow:
    workflow = Workflow(*args, **kwargs)  # type: ignore[arg-type]
    built.append(workflow)
    return workflow


@pytest.mark.parametrize(
    ("steps", "message"),
    [
        ([], "at least one step"),
        ([Parallel([Step(first)])], "at least two branches"),
        ([Parallel([Step(first)], [])], "branch 2 of Parallel has no steps"),
        ([Delay(timedelta(0))], "positive timedelta"),
        ([Delay(timedelta(seconds=-1))], "positive timedelta"),
        ([WaitForSignal("s", correlate="k", timeout=timedelta(0))], "positive timedelta"),
        ([Step(first, compensate=second)], "compensate= outside a saga"),
        ([Step(first, on_failure=OnFailure.COMPENSATE)], "COMPENSATE outside a saga"),
        ([Saga([])], "needs at least one step"),
        ([Saga([Saga([Step(first)])])], "nested=Nested.UNWIND or nested=Nested.KEEP"),
        ([Saga([Step(first)], nested=Nested.KEEP)], "only applies to a saga inside"),
        ([If("flag", then=[])], "at least one step in then="),
        ([ForEach("items", [])], "at least one step in its body"),
        ([first], "not a step (wrap an activity in Step(...))"),
        ([Step(lambda ctx: None)], "module-level def"),
        ([Step(print)], "module-level function or class"),
        ([Step(first), Step(second, id="a1")], "two steps have the id 'a1'"),
        ([WaitForSignal("s", correlate="k", into="x", bind=lambda d, p: None)], "not both"),
        ([WaitForSignal("s", correlate="k", on_timeout=[Step(first)])], "never run"),
        ([WaitForSignal(" ", correlate="k")], "non-blank"),
        ([WaitForSignal("s", correlate="a..b")], "is not a key path"),
        ([WaitForSignal("s", correlate="k", payload=set)], "payload= must be"),
    ],
)
def test_an_invalid_graph_fails_when_the_definition_is_built(
    steps: list[object], message: str
) -> None:
    with pytest.raises(InvalidWorkflow, match="t-invalid") as raised:
        Workflow("t-invalid", steps=steps)  # type: ignore[arg-type]
    assert message in str(raised.value)
    with pytest.raises(UnknownWorkflow):
        find("t-invalid")


def test_an_activity_must_take_exactly_the_context() -> None:
    with pytest.raises(InvalidWorkflow, match="exactly one argument"):
        Workflow("t-invalid", steps=[Step(flows.reset)])


def test_a_job_is_not_an_activity() -> None:
    from tests.unit.engine.sample_jobs import add

    with pytest.raises(InvalidWorkflow, match="is a @job"):
        Workflow("t-invalid", steps=[Step(add)])


@pytest.mark.parametrize("bad", ["", "  ", None, 7])
def test_a_blank_id_is_refused(bad: object) -> None:
    with pytest.raises(InvalidWorkflow, match="non-blank"):
        Workflow(bad, steps=[Step(first)])  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [0, -1, 1.0, "1", True])
def test_a_version_below_one_is_refused(bad: object) -> None:
    with pytest.raises(InvalidWorkflow, match="version must be an integer >= 1"):
        Workflow("t-invalid", version=bad, steps=[Step(first)])  # type: ignore[arg-type]


def test_a_duplicate_id_and_version_fails(built: list[Workflow]) -> None:
    build(built, "t-duplicate", version=1, steps=[Step(first)], module="somewhere.else")
    with pytest.raises(InvalidWorkflow, match="is defined twice"):
        Workflow("t-duplicate", version=1, steps=[Step(second)])
    build(built, "t-duplicate", version=2, steps=[Step(second)])
    assert find("t-duplicate").version == 2


def test_rebuilding_the_same_definition_in_the_same_module_replaces_it(
    built: list[Workflow],
) -> None:
    one = build(built, "t-reimported", steps=[Step(first)])
    two = build(built, "t-reimported", steps=[Step(first)])
    assert find("t-reimported") is two is not one


def test_find_picks_the_latest_version_or_the_pinned_one() -> None:
    assert find("t-versioned") is flows.VERSIONED_2
    assert find("t-versioned", 1) is flows.VERSIONED_1
    with pytest.raises(UnknownWorkflow, match="versions defined here: 1, 2"):
        find("t-versioned", 3)
    with pytest.raises(UnknownWorkflow, match="is the module that defines it imported"):
        find("t-never-defined")


def test_find_imports_the_module_a_definition_was_declared_in() -> None:
    with pytest.raises(UnknownWorkflow, match="cannot import its module"):
        find("t-elsewhere", 1, "tests.unit.workflow.no_such_module")
    found = find("t-lazy", 1, "tests.unit.workflow.lazy_flows")
    assert found.module == "tests.unit.workflow.lazy_flows"


def test_node_ids_follow_build_order_with_a_counter_per_kind() -> None:
    workflow = flows.WAIT_WITH_TIMEOUT
    assert workflow.graph.order == ("a1", "sig1", "a2", "a3")
    assert flows.NESTED_UNWIND.graph.order == ("saga1", "a1", "saga2", "a2", "a3", "a4")


def test_the_graph_export_lists_nodes_edges_and_kinds() -> None:
    graph = flows.BRANCHING.export_graph()
    assert graph["id"] == "t-branching"
    assert graph["version"] == 1
    assert graph["start"] == "if1"
    assert graph["nodes"] == [
        {
            "id": "if1",
            "kind": "if",
            "next": "a3",
            "condition": "tests.unit.workflow.flows.is_big",
            "when_true": "a1",
            "when_false": "a2",
        },
        {"id": "a1", "kind": "activity", "next": "a3", "activity": "tests.unit.workflow.flows.big"},
        {
            "id": "a2",
            "kind": "activity",
            "next": "a3",
            "activity": "tests.unit.workflow.flows.small",
        },
        {
            "id": "a3",
            "kind": "activity",
            "next": None,
            "activity": "tests.unit.workflow.flows.first",
        },
    ]
    assert graph["edges"] == [
        {"from": "if1", "to": "a1", "kind": "true"},
        {"from": "if1", "to": "a2", "kind": "false"},
        {"from": "a1", "to": "a3", "kind": "next"},
        {"from": "a2", "to": "a3", "kind": "next"},
    ]


def test_the_export_shows_branches_joins_sagas_waits_and_lambdas() -> None:
    graph = flows.FANOUT.export_graph()
    edges = {(e["from"], e["to"], e["kind"]) for e in graph["edges"]}  # type: ignore[index]
    assert ("par1", "a1", "branch") in edges
    assert ("a1", "a5", "join") in edges  # each branch's end joins before 'after'
    assert ("a2", "a3", "next") in edges
    assert ("a3", "a5", "join") in edges
    assert ("a4", "a5", "join") in edges
    assert ("par1", "a5", "next") in edges
    trip = {n["id"]: n for n in flows.TRIP.export_graph()["nodes"]}  # type: ignore[index,union-attr]
    assert trip["a2"]["saga"] == "saga1"
    assert trip["a2"]["compensation"] == "tests.unit.workflow.flows.cancel_hotel"
    wait = {n["id"]: n for n in flows.WAIT_WITH_TIMEOUT.export_graph()["nodes"]}  # type: ignore[index,union-attr]
    assert wait["sig1"]["correlation"] == 'lambda data: str(data["key"])'
    assert wait["sig1"]["timeout"] == 1800.0
    assert wait["sig1"]["on_timeout"] == "a2"
    nested = {n["id"]: n for n in flows.NESTED_KEEP.export_graph()["nodes"]}  # type: ignore[index,union-attr]
    assert nested["saga2"]["nesting"] == "keep"


def test_steps_may_name_their_node_ids(built: list[Workflow]) -> None:
    workflow = build(
        built, "t-named", steps=[Step(first, id="reserve"), Step(second), Step(third, id="ship")]
    )
    assert workflow.graph.order == ("reserve", "a2", "ship")
