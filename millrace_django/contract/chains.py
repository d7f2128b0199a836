"""Sibling workflow steps acknowledged in one call.

A worker that acknowledges several steps of one instance together plans each onto the
state the one before it leaves (see ``runtime/execution.py``), so each expects the
revision its predecessor's checkpoint makes. A revision is a counter, not the state: if
the predecessor is not applied, another writer may bring the instance to that revision
with other content, and the step planned on the predecessor's state must not land on
it. So within one ``apply_many`` call, such a step applies only if its predecessor did.
"""

from __future__ import annotations

from collections.abc import Sequence
from uuid import UUID

from millrace_django.contract.records import JobTransition
from millrace_django.errors import ConcurrencyConflict


def predecessors(transitions: Sequence[JobTransition]) -> dict[int, int]:
    """Position to position of its predecessor: the latest earlier transition of the
    call whose checkpoint leaves the instance at the revision this one expects."""
    leaving: dict[tuple[UUID, int], int] = {}
    found: dict[int, int] = {}
    for position, t in enumerate(transitions):
        checkpoint = t.checkpoint
        if checkpoint is None:
            continue
        instance_id = checkpoint.instance.id
        before = leaving.get((instance_id, checkpoint.expected_revision))
        if before is not None:
            found[position] = before
        leaving[(instance_id, checkpoint.expected_revision + 1)] = position
    return found


def unapplied_predecessor(t: JobTransition) -> ConcurrencyConflict:
    """The outcome of ``t`` when its predecessor in the call was not applied."""
    assert t.checkpoint is not None
    return ConcurrencyConflict(
        f"workflow instance {t.checkpoint.instance.id}: the step before job {t.job_id} in "
        "the same call was not applied, so its checkpoint was not written"
    )
