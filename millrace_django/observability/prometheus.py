"""The monitoring read model as Prometheus text exposition (format 0.0.4).

Written by hand: a dozen gauges need no client library. Every figure is read from the
storage when scraped (one statistics read, one recurring page of one row, the worker
registry), so several replicas serving the endpoint report the same values; nothing
here counts in process memory.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from millrace_django.contract import Storage, TenantFilter

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"

type Labels = tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class Family:
    """One metric: its name, help text and samples (all gauges here)."""

    name: str
    help: str
    samples: list[tuple[Labels, float]] = field(default_factory=list)
    kind: str = "gauge"

    def add(self, value: float, **labels: str) -> None:
        self.samples.append((tuple(labels.items()), value))


def escape_label(value: str) -> str:
    """A label value as the text format wants it: backslash, quote and newline escaped."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _number(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return str(int(value)) if float(value).is_integer() else repr(float(value))


def render(families: Iterable[Family]) -> str:
    """The exposition text: ``# HELP`` and ``# TYPE`` lines, then each sample."""
    lines: list[str] = []
    for family in families:
        lines.append(f"# HELP {family.name} {_escape_help(family.help)}")
        lines.append(f"# TYPE {family.name} {family.kind}")
        for labels, value in family.samples:
            text = ",".join(f'{key}="{escape_label(val)}"' for key, val in labels)
            lines.append(
                f"{family.name}{{{text}}} {_number(value)}"
                if text
                else f"{family.name} {_number(value)}"
            )
    return "\n".join(lines) + "\n"


def collect(
    storage: Storage,
    *,
    now: datetime,
    queues: Collection[str],
    gone_before: datetime,
) -> list[Family]:
    """The gauges, read from ``storage`` as of ``now``.

    ``queues`` are the configured ones (reported even when empty); a registered worker
    last seen before ``gone_before`` counts as gone. Reads a storage lacks (the worker
    registry, paused queues) leave their gauges out.
    """
    stats = storage.get_statistics(TenantFilter.any())
    jobs = Family("millrace_jobs", "Jobs by state.")
    for state, count in sorted(stats.jobs_by_state.items()):
        jobs.add(count, state=state.value)
    names = sorted(set(queues) | set(stats.enqueued_by_queue))
    depth = Family("millrace_queue_depth", "Jobs ready to run (enqueued), by queue.")
    age = Family(
        "millrace_queue_oldest_job_age_seconds",
        "Seconds since the oldest enqueued job of the queue was created (0 when empty).",
    )
    for queue in names:
        depth.add(stats.enqueued_by_queue.get(queue, 0), queue=queue)
        oldest = stats.oldest_enqueued_by_queue.get(queue)
        age.add(max((now - oldest).total_seconds(), 0.0) if oldest else 0, queue=queue)
    instances = Family("millrace_workflow_instances", "Workflow instances by state.")
    for instance_state, count in sorted(stats.instances_by_state.items()):
        instances.add(count, state=instance_state.value)
    recurring = Family("millrace_recurring_definitions", "Recurring (cron) definitions.")
    recurring.add(stats.recurring_definitions)
    overdue = Family(
        "millrace_recurring_overdue_definitions",
        "Recurring definitions whose next fire time has passed.",
    )
    overdue.add(stats.overdue_recurring_definitions)
    lag = Family(
        "millrace_recurring_next_fire_lag_seconds",
        "Seconds the most overdue recurring definition is past its fire time (0: none is).",
    )
    # The most overdue of those due: a disabled or held-back definition is not late.
    due = storage.get_due_recurring(now, 1)
    lag.add(max((now - due[0].next_fire_time).total_seconds(), 0.0) if due else 0)
    families = [jobs, depth, age, instances, recurring, overdue, lag]
    families += _queue_pauses(storage, names)
    families += _workers(storage, gone_before)
    return families


def _queue_pauses(storage: object, names: Sequence[str]) -> list[Family]:
    read = getattr(storage, "paused_queues", None)
    if read is None:
        return []
    paused = set(read())
    family = Family("millrace_queue_paused", "1 while an operator has paused the queue.")
    for queue in sorted(set(names) | paused):
        family.add(1 if queue in paused else 0, queue=queue)
    return [family]


def _workers(storage: object, gone_before: datetime) -> list[Family]:
    read = getattr(storage, "list_workers", None)
    if read is None:
        return []
    beats = read()
    alive = [beat for beat in beats if beat.seen_at >= gone_before]
    workers = Family(
        "millrace_workers",
        "Registered workers: alive (a recent heartbeat) or gone (none for several).",
    )
    workers.add(len(alive), status="alive")
    workers.add(len(beats) - len(alive), status="gone")
    held = Family(
        "millrace_workers_in_flight_jobs", "Jobs held by alive workers at their last heartbeat."
    )
    held.add(sum(beat.in_flight for beat in alive))
    capacity = Family("millrace_workers_concurrency", "Job slots of alive workers.")
    capacity.add(sum(beat.concurrency for beat in alive))
    return [workers, held, capacity]
