"""Sibling workflow steps acknowledged in one batch are planned one onto another before
they are written (runtime/execution.py ``chain_checkpoints``)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime

import pytest

from millrace_django.clock import FakeClock
from millrace_django.contract import (
    InstanceState,
    JobState,
    JobTransition,
    WorkflowCheckpoint,
    WorkflowInstanceRecord,
)
from millrace_django.engine import JobContext
from millrace_django.engine.job_context import SideEffects
from millrace_django.ids import new_id
from millrace_django.runtime.execution import chain_checkpoints

NOW = datetime(2026, 12, 5, 7, 0, tzinfo=UTC)


def _instance(revision: int, data: dict[str, bool]) -> WorkflowInstanceRecord:
    return WorkflowInstanceRecord(
        id=INSTANCE_ID,
        definition_id="fan",
        definition_version=1,
        state=InstanceState.RUNNING,
        data=dict(data),
        cursor={},
        revision=revision,
        created_at=NOW,
        updated_at=NOW,
    )


INSTANCE_ID = new_id(FakeClock())


def _step(branch: str, replans: list[WorkflowInstanceRecord]) -> tuple[JobContext, JobTransition]:
    """A branch that sets ``data[branch]`` on the instance as read at revision 1; its
    ``replan`` does the same on any given state (and records what it was given)."""

    def plan(instance: WorkflowInstanceRecord) -> SideEffects:
        replans.append(instance)
        assert isinstance(instance.data, dict)
        moved = replace(instance, data={**instance.data, branch: True})
        return SideEffects(
            checkpoint=WorkflowCheckpoint(instance=moved, expected_revision=instance.revision),
            replan=plan,
        )

    context = JobContext(job_id=new_id(FakeClock()), attempt=1, tenant=None, clock=FakeClock())
    effects = plan(_instance(1, {}))
    replans.clear()
    context.side_effects = effects
    transition = JobTransition(
        job_id=context.job_id,
        expected_worker_id="w1",
        expected_attempt=1,
        target=JobState.SUCCEEDED,
        failures=0,
        finished_at=NOW,
        checkpoint=effects.checkpoint,
    )
    return context, transition


def test_siblings_are_planned_onto_the_state_the_one_before_leaves() -> None:
    replans: list[WorkflowInstanceRecord] = []
    writes = [_step(branch, replans) for branch in ("a", "b", "c")]

    chained = chain_checkpoints(writes)

    revisions = [t.checkpoint.expected_revision for t in chained]  # type: ignore[union-attr]
    assert revisions == [1, 2, 3]
    last = chained[-1].checkpoint
    assert last is not None and last.instance.data == {"a": True, "b": True, "c": True}
    assert [r.revision for r in replans] == [2, 3]
    assert writes[2][0].side_effects is not None
    assert writes[2][0].side_effects.checkpoint == last


def test_a_sibling_whose_planning_fails_is_written_as_planned_and_the_next_chains_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    replans: list[WorkflowInstanceRecord] = []
    writes = [_step(branch, replans) for branch in ("a", "b", "c")]
    broken = writes[1][0].side_effects
    assert broken is not None

    def fails(instance: WorkflowInstanceRecord) -> SideEffects:
        raise RuntimeError("the definition is gone")

    writes[1][0].side_effects = replace(broken, replan=fails)

    chained = chain_checkpoints(writes)

    assert chained[1] == writes[1][1]  # as planned: it will conflict and re-merge
    third = chained[2].checkpoint
    assert third is not None and third.expected_revision == 2
    assert third.instance.data == {"a": True, "c": True}
    assert "planning it onto its sibling failed" in caplog.text
