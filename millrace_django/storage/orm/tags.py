"""Job tags in ``millrace_job_tag``: one row per tag of a job, written with the job.

Untagged jobs write nothing here, so their enqueue costs what it did. A tag filter
reads the tag's entries of the ``(tag, job)`` index and the jobs they name, whatever
else the job table holds; a purged job's tags go with it (the foreign key cascades).
"""

from __future__ import annotations

from collections.abc import Iterable

from django.db.models import QuerySet

from millrace_django.contract import JobRecord
from millrace_django.models import Job, JobTag
from millrace_django.storage.orm.context import OrmContext


def rows(ctx: OrmContext) -> QuerySet[JobTag]:
    """The tag rows of ``ctx``'s database."""
    return JobTag.objects.using(ctx.alias)


def store(ctx: OrmContext, inserted: Iterable[tuple[Job, JobRecord]]) -> None:
    """Write the tags of newly inserted jobs (rows with their keys) as the records give
    them."""
    tagged = [JobTag(job_id=row.seq, tag=tag) for row, job in inserted for tag in job.tags]
    if tagged:
        rows(ctx).bulk_create(tagged)


def of_job(ctx: OrmContext, seq: int) -> tuple[str, ...]:
    """The tags of the job whose key is ``seq``, sorted (through ``millrace_job_tag_job``)."""
    return tuple(rows(ctx).filter(job_id=seq).order_by("tag").values_list("tag", flat=True))


def carrying(ctx: OrmContext, tag: str) -> QuerySet[JobTag, int]:
    """Keys of the jobs carrying ``tag``: a range of ``millrace_job_tag_once``, to be used
    as a subquery."""
    return rows(ctx).filter(tag=tag).values_list("job_id", flat=True)
