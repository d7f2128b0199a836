"""The failure path's first link: a dead workflow job brings its handler along.

:func:`failure_jobs` is called by the outcome rules for every job declared dead (after
failures, a timeout, a poison pill, or because it cannot even start), so the handler is
inserted in the same atom as the dead-letter transition and is never lost.
"""

from __future__ import annotations

from millrace_django.clock import Clock
from millrace_django.contract import Invocation, JobRecord, JobState, RetrySpec
from millrace_django.engine.workflow import targets
from millrace_django.ids import new_id


def failure_jobs(job: JobRecord, *, clock: Clock, retry: RetrySpec) -> list[JobRecord]:
    """The :data:`~millrace_django.engine.workflow.targets.FAIL` job for a dead
    workflow job, on the same queue and tenant; nothing for any other job."""
    instance_id = job.workflow_instance_id
    if instance_id is None or job.invocation.target not in targets.NOTIFY_ON_DEATH:
        return []
    return [
        JobRecord(
            id=new_id(clock),
            queue=job.queue,
            invocation=Invocation(target=targets.FAIL, args=(str(instance_id), str(job.id))),
            state=JobState.ENQUEUED,
            created_at=clock.now(),
            priority=job.priority,
            retry=retry,
            tenant_id=job.tenant_id,
            workflow_instance_id=instance_id,
            activity_node_id=job.activity_node_id,
        )
    ]
