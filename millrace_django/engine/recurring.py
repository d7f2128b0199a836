"""Turning a recurring definition into jobs: shared by the client's trigger and the scheduler.

Fired jobs copy the definition's queue, priority, retry and tenant, carry its id as
provenance, and take no idempotency key (the definition's id is its identity). Their
timeouts and deadline come from the job's ``@job`` options (a deadline counts from the
fire).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any

from millrace_django.clock import Clock
from millrace_django.contract import JobRecord, JobState, Limit, RecurringChange, RecurringRecord
from millrace_django.engine.cron import CronSchedule
from millrace_django.engine.errors import InvalidCron
from millrace_django.engine.expiry import deadline
from millrace_django.engine.invocation import capture, find, resolve
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


def first_fire_time(schedule: CronSchedule, now: datetime) -> datetime:
    """The first occurrence of ``schedule`` after ``now``; raises
    :class:`~millrace_django.engine.errors.InvalidCron` if it has none soon enough."""
    following = schedule.next_after(now)
    if following is None:
        raise InvalidCron(f"cron {schedule.expression!r} has no occurrence in the next 5 years")
    return following


def change_of(
    record: RecurringRecord,
    now: datetime,
    *,
    cron: str | None = None,
    timezone: str | None = None,
    arguments: tuple[Sequence[Any], Mapping[str, Any]] | None = None,
    max_bytes: int,
) -> RecurringChange:
    """The edit of ``record`` to a new schedule and/or new arguments (``(args, kwargs)``,
    replacing the stored ones whole; ``None`` keeps what is stored), validated exactly
    as an upsert validates them: raises
    :class:`~millrace_django.engine.errors.InvalidCron` (or ``UnknownTimezone``), and
    for arguments that do not fit the function as deployed ``InvalidJobArguments``,
    ``ArgumentsTooLarge`` or ``UnresolvableTarget``. A changed schedule fires next
    after ``now``; an unchanged one keeps its pending fire time (the storage keeps it)."""
    schedule = CronSchedule.parse(
        record.cron if cron is None else cron, record.timezone if timezone is None else timezone
    )
    invocation = record.invocation
    if arguments is not None:
        args, kwargs = arguments
        definition = resolve(record.invocation.target)
        invocation = capture(definition, tuple(args), dict(kwargs), max_bytes=max_bytes)
    return RecurringChange(
        cron=schedule.expression,
        timezone=schedule.timezone,
        invocation=invocation,
        next_fire_time=first_fire_time(schedule, now),
    )
