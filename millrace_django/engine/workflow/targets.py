"""The dotted targets of the dispatcher's jobs (module-level ``@job`` functions in
:mod:`millrace_django.engine.workflow.jobs`), named here so that modules building
workflow jobs need not import the dispatcher."""

from __future__ import annotations

_MODULE = "millrace_django.engine.workflow.jobs"

RUN = f"{_MODULE}:run_node"
"""Runs one position of an instance (an activity, a compensation, a timer, a timeout)."""
RESUME = f"{_MODULE}:resume"
"""Carries a consumed bookmark (a signal or its timeout) into the instance."""
FAIL = f"{_MODULE}:handle_failure"
"""Enqueued with a dead workflow job, in the same atom: applies the failure policy."""
RECOVER = f"{_MODULE}:recover"
"""An operator's recovery of a suspended instance."""

NOTIFY_ON_DEATH = frozenset({RUN, RESUME})
"""Workflow jobs whose death is handled by a :data:`FAIL` job (never that job itself,
so a failing failure handler cannot loop)."""
