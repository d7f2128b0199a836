"""Durable workflows on top of jobs: code-first, versioned definitions whose every
activity runs as an ordinary job and whose progress commits with that job.

See ``docs/workflows.md``. The Django-side facade is :mod:`millrace_django.workflows`.
"""

from millrace_django.engine.workflow.activity import ActivityContext
from millrace_django.engine.workflow.client import (
    Position,
    Stuck,
    WorkflowClient,
    WorkflowInstance,
)
from millrace_django.engine.workflow.definition import Workflow, find, registered, unregister
from millrace_django.engine.workflow.errors import (
    InvalidSignalPayload,
    InvalidWorkflow,
    InvalidWorkflowData,
    UnknownWorkflow,
    WorkflowStepError,
)
from millrace_django.engine.workflow.merge import merge
from millrace_django.engine.workflow.signals import Signal
from millrace_django.engine.workflow.spec import (
    Delay,
    ForEach,
    If,
    Nested,
    OnFailure,
    Parallel,
    Recovery,
    Saga,
    Step,
    WaitForSignal,
)

__all__ = [
    "ActivityContext",
    "Delay",
    "ForEach",
    "If",
    "InvalidSignalPayload",
    "InvalidWorkflow",
    "InvalidWorkflowData",
    "Nested",
    "OnFailure",
    "Parallel",
    "Position",
    "Recovery",
    "Saga",
    "Signal",
    "Step",
    "Stuck",
    "UnknownWorkflow",
    "WaitForSignal",
    "Workflow",
    "WorkflowClient",
    "WorkflowInstance",
    "WorkflowStepError",
    "find",
    "merge",
    "registered",
    "unregister",
]
