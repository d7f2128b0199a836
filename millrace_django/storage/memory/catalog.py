"""The job catalog over the memory store's own tables (it counts what it holds)."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta

from millrace_django.contract import (
    RUN_TIME_WINDOW,
    CatalogEntry,
    JobRecord,
    JobState,
    TenantFilter,
    floor_minute,
    run_time_bucket,
)
from millrace_django.storage.memory.tables import Tables

_ERRORED = frozenset({JobState.DEAD, JobState.FAILED})


def catalog(
    tables: Tables, tenant: TenantFilter, target: str | None, tag: str | None, now: datetime
) -> list[CatalogEntry]:
    """One entry per target of the jobs of ``tenant`` (only ``target`` when given, only
    the targets ``tag`` was seen on when given)."""
    tags: dict[str, list[str]] = {}
    for seen_tag, seen_target in sorted(tables.tag_targets):
        tags.setdefault(seen_target, []).append(seen_tag)
    counts: dict[str, Counter[JobState]] = {}
    errored: dict[str, JobRecord] = {}
    runs: dict[str, Counter[int]] = {}
    since = floor_minute(now - RUN_TIME_WINDOW)
    for job in tables.jobs.values():
        name = job.invocation.target
        if not tenant.matches(job.tenant_id) or target not in (None, name):
            continue
        if tag is not None and tag not in tags.get(name, ()):
            continue
        counts.setdefault(name, Counter())[job.state] += 1
        ran = _run_time(job, since)
        if ran is not None:
            runs.setdefault(name, Counter())[run_time_bucket(ran)] += 1
        newest = errored.get(name)
        if job.state in _ERRORED and (newest is None or _key(job) > _key(newest)):
            errored[name] = job
    return [
        CatalogEntry(
            target=name,
            jobs_by_state={state: by_state[state] for state in JobState},
            last_error=errored[name].last_error if name in errored else None,
            last_error_job=errored[name].id if name in errored else None,
            last_error_at=errored[name].created_at if name in errored else None,
            run_times=dict(runs.get(name, {})),
            tags=tuple(tags.get(name, ())),
        )
        for name, by_state in sorted(counts.items())
    ]


def _run_time(job: JobRecord, since: datetime) -> timedelta | None:
    """How long a success that ended from minute ``since`` on ran; ``None`` for others."""
    if job.state is not JobState.SUCCEEDED or job.started_at is None or job.finished_at is None:
        return None
    if job.finished_at < since:
        return None
    return max(job.finished_at - job.started_at, timedelta(0))


def _key(job: JobRecord) -> tuple[object, bytes]:
    """Newest first as the job list orders (creation time, then id bytes)."""
    return job.created_at, job.id.bytes
