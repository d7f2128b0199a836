"""Reading a claimed batch's workflow instances at once.

A workflow step is an ordinary job whose first act is reading its instance. Read by
each job thread on its own, that is one round trip per step on a connection the thread
may have to open first (Django closes a job thread's connections between jobs unless
``CONN_MAX_AGE`` says otherwise). The worker reads them all right after its claim, on
its own connection, in one statement, and hands each to its job.
"""

from __future__ import annotations

from collections.abc import Sequence
from uuid import UUID

from millrace_django.contract import JobRecord, JobStorage, WorkflowInstanceRecord, WorkflowStorage
from millrace_django.engine.workflow import targets

_DISPATCHERS = frozenset({targets.RUN, targets.RESUME, targets.FAIL, targets.RECOVER})


def instances_of(
    storage: JobStorage, jobs: Sequence[JobRecord]
) -> dict[UUID, WorkflowInstanceRecord]:
    """The live instance of each workflow job in ``jobs``, by job id (jobs of other
    kinds, and those whose instance is gone, are left out)."""
    if not isinstance(storage, WorkflowStorage):
        return {}
    wanted: dict[UUID, UUID] = {}
    for job in jobs:
        invocation = job.invocation
        if invocation.target in _DISPATCHERS and invocation.args:
            try:
                wanted[job.id] = UUID(str(invocation.args[0]))
            except ValueError:
                continue  # not ours to judge here: the dispatcher reports it
    if not wanted:
        return {}
    instances = storage.get_instances(set(wanted.values()))
    return {job: instances[i] for job, i in wanted.items() if i in instances}
