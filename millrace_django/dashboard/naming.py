"""What a job is, in an operator's words: a workflow job by its workflow, instance and
step, rather than by the dispatcher function every workflow job runs."""

from __future__ import annotations

from dataclasses import dataclass
from uuid import UUID

from millrace_django.contract import JobSummary
from millrace_django.engine.workflow import targets

KINDS = {
    targets.RUN: None,
    targets.RESUME: "resume",
    targets.FAIL: "failure handling",
    targets.RECOVER: "recovery",
}
"""What each dispatcher job does for its step (running it needs no word)."""


@dataclass(frozen=True, slots=True)
class WorkflowStep:
    """The step of a workflow instance a job works on."""

    definition_id: str | None
    """``None`` once the instance is gone."""
    instance_id: UUID
    node_id: str | None
    kind: str | None


def workflow_step(job: JobSummary) -> WorkflowStep | None:
    """The workflow step ``job`` runs, resumes or recovers; ``None`` for any other job."""
    if job.workflow_instance_id is None:
        return None
    return WorkflowStep(
        definition_id=job.workflow_definition_id,
        instance_id=job.workflow_instance_id,
        node_id=job.activity_node_id,
        kind=KINDS.get(job.target),
    )
