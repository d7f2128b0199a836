"""Turning a recurring definition into jobs: shared by the client's trigger and the scheduler.

Fired jobs copy the definition's queue, priority, retry and tenant, carry its id as
provenance, and take no idempotency key (the definition's id is its identity). Their
timeouts and deadline come from the job's ``@job`` options (a deadline counts from the
fire).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from types import MappingProxyType

from millrace_django.clock import Clock
from millrace_django.contract import JobRecord, JobState, Limit, RecurringRecord
from millrace_django.engine.cron import CronSchedule
from millrace_django.engine.expiry import deadline
from millrace_django.engine.invocation import find
from millrace_django.engine.limits import limits_of_call
from millrace_django.ids import new_id

FAR_FUTURE = datetime.max.replace(tzinfo=UTC)
"""Where a definition whose cron has no future occurrence is parked after its last fire."""


def occurrence(
    record: RecurringRecord,
    clock: Clock,
    queue_limits: Mapping[str, Limit] = MappingProxyType({}),
) -> JobRecord:
    """An ``enqueued`` job for one occurrence of ``record``, with the limit of its queue
    in ``queue_limits``."""
    definition = find(record.invocation.target)  # timeouts, deadline, limits live there
    now = clock.now()
    return JobRecord(
        id=new_id(clock),
        queue=record.queue,
        invocation=record.invocation,
        state=JobState.ENQUEUED,
        created_at=now,
        priority=record.priority,
        retry=record.retry,
        timeout=definition.options.timeout if definition is not None else None,
        hard_timeout=definition.options.hard_timeout if definition is not None else None,
        tenant_id=record.tenant_id,
        recurring_id=record.id,
        expires_at=deadline(definition.options.expires, now) if definition is not None else None,
        limits=limits_of_call(definition, record.queue, record.invocation, queue_limits),
    )


def following_fire_time(record: RecurringRecord, now: datetime) -> datetime:
    """The next fire time after firing at ``now``: computed from *now*, so missed
    occurrences collapse into the one just fired. Raises
    :class:`~millrace_django.engine.errors.InvalidCron` for a stored cron that no
    longer parses (the scheduler logs it and moves on)."""
    following = CronSchedule.parse(record.cron, record.timezone).next_after(now)
    return following if following is not None else FAR_FUTURE
