"""Job tags in ``millrace_job_tag``: one row per tag of a job, written with the job.

Untagged jobs write nothing here, so their enqueue costs what it did. A tag filter
reads the tag's entries of the ``(tag, job)`` index and the jobs they name, whatever
else the job table holds; a purged job's tags go with it (the foreign key cascades).
"""

from __future__ import annotations

from collections.abc import Iterable

from django.db import IntegrityError, connections, transaction
from django.db.models import QuerySet

from millrace_django.contract import JobRecord
from millrace_django.models import Job, JobTag, TagTarget
from millrace_django.storage.orm.context import OrmContext


def rows(ctx: OrmContext) -> QuerySet[JobTag]:
    """The tag rows of ``ctx``'s database."""
    return JobTag.objects.using(ctx.alias)


def store(ctx: OrmContext, inserted: Iterable[tuple[Job, JobRecord]]) -> None:
    """Write the tags of newly inserted jobs (rows with their keys) as the records give
    them, and the ``(tag, target)`` pairs not seen before."""
    tagged = [JobTag(job_id=row.seq, tag=tag) for row, job in inserted for tag in job.tags]
    if tagged:
        rows(ctx).bulk_create(tagged)
        _pair(ctx, {(tag, job.invocation.target) for _, job in inserted for tag in job.tags})


def _pair(ctx: OrmContext, pairs: set[tuple[str, str]]) -> None:
    """Insert the pairs not stored yet. Two enqueues may race to insert the same pair:
    where the database can ignore the conflict it does; elsewhere (SQL Server) the
    loser's savepoint rolls back and its enqueue goes on, the pair being there."""
    stored = TagTarget.objects.using(ctx.alias)
    tags = {tag for tag, _ in pairs}
    pairs -= set(stored.filter(tag__in=tags).values_list("tag", "target"))
    if not pairs:
        return
    new = [TagTarget(tag=tag, target=target) for tag, target in sorted(pairs)]
    if connections[ctx.alias].features.supports_ignore_conflicts:
        stored.bulk_create(new, ignore_conflicts=True)
        return
    try:
        with transaction.atomic(using=ctx.alias):
            stored.bulk_create(new)
    except IntegrityError:
        pass


def targets(ctx: OrmContext) -> dict[str, tuple[str, ...]]:
    """Every target's tags, sorted (the whole ``millrace_tag_target``: a few rows per
    tag)."""
    found: dict[str, list[str]] = {}
    for tag, target in (
        TagTarget.objects.using(ctx.alias).order_by("tag").values_list("tag", "target")
    ):
        found.setdefault(target, []).append(tag)
    return {target: tuple(tags) for target, tags in found.items()}


def of_job(ctx: OrmContext, seq: int) -> tuple[str, ...]:
    """The tags of the job whose key is ``seq``, sorted (through ``millrace_job_tag_job``)."""
    return tuple(rows(ctx).filter(job_id=seq).order_by("tag").values_list("tag", flat=True))


def carrying(ctx: OrmContext, tag: str) -> QuerySet[JobTag, int]:
    """Keys of the jobs carrying ``tag``: a range of ``millrace_job_tag_once``, to be used
    as a subquery."""
    return rows(ctx).filter(tag=tag).values_list("job_id", flat=True)
