"""The job catalog: figures per job function, for the dashboard's catalog pages.

Every figure comes from what a provider keeps anyway, never from counting finished jobs:
unfinished jobs are counted where they are (few, through the indexes that hold them),
finished ones from the maintained counts, and the last error is read from the newest
failed or dead job of the function alone. A tag's catalog is the entries of the
functions whose jobs were stored with that tag, and their sum (:func:`catalog_total`): tags
are a function's labels, so its figures are counted per function, not per tag.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from uuid import UUID

from millrace_django.contract.states import JobState

RUN_TIME_WINDOW = timedelta(hours=1)
"""How far back run times count: successes that finished in the last hour (whole UTC
minutes: from the minute an hour before the read's)."""
RUN_TIME_BOUNDS: tuple[float, ...] = (
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600,
)  # fmt: skip
"""Upper bounds, in seconds, of the run-time buckets successes are counted in: bucket
``n`` holds run times in ``[RUN_TIME_BOUNDS[n-1], RUN_TIME_BOUNDS[n])`` (bucket 0 those
under the first bound, the last bucket those of an hour or more)."""


def run_time_bucket(run_time: timedelta) -> int:
    """The bucket a success that ran for ``run_time`` is counted in."""
    return bisect_right(RUN_TIME_BOUNDS, run_time.total_seconds())


def bucket_estimate(histogram: Mapping[int, int], share: float) -> timedelta | None:
    """An estimate of the ``share`` quantile (0.5: the median) of the run times counted
    in ``histogram`` (bucket -> count): the upper bound of the bucket it falls in, so at
    most that bucket's width too high; the last bound for the open last bucket. ``None``
    when nothing was counted."""
    total = sum(histogram.values())
    if not total:
        return None
    seen = 0
    for bucket in sorted(histogram):
        seen += histogram[bucket]
        if seen >= share * total:
            return timedelta(seconds=RUN_TIME_BOUNDS[min(bucket, len(RUN_TIME_BOUNDS) - 1)])
    raise AssertionError("unreachable: the buckets sum to the total")


@dataclass(frozen=True, slots=True, kw_only=True)
class CatalogEntry:
    """One job function (its dotted target) and its figures."""

    target: str
    jobs_by_state: Mapping[JobState, int]
    """Every state, zeros included: unfinished jobs as they are now, finished ones as
    long as they are kept (the retention period)."""
    last_error: str | None = None
    """The error of the newest (by creation) of the function's jobs that are ``dead`` or
    ``failed`` (awaiting a retry); ``None`` if there is none."""
    last_error_job: UUID | None = None
    last_error_at: datetime | None = None
    """When that job was created."""
    run_times: Mapping[int, int] | None = None
    """Successes that finished within :data:`RUN_TIME_WINDOW`, counted per run-time
    bucket (:data:`RUN_TIME_BOUNDS`): how long each ran, from its claim to its end."""
    tags: tuple[str, ...] = ()
    """Every tag the function's jobs were stored with (kept once seen, even after those
    jobs are purged), sorted."""

    @property
    def failure_rate(self) -> float | None:
        """The share of the function's kept finished runs that ended ``dead`` (of those
        ``succeeded`` or ``dead``); ``None`` before any ended."""
        dead = self.jobs_by_state.get(JobState.DEAD, 0)
        ended = dead + self.jobs_by_state.get(JobState.SUCCEEDED, 0)
        return dead / ended if ended else None

    @property
    def recent_runs(self) -> int:
        """Successes counted in :attr:`run_times`."""
        return sum((self.run_times or {}).values())

    @property
    def run_time_p50(self) -> timedelta | None:
        """The median run time of :attr:`run_times`, a bucket estimate (see
        :func:`bucket_estimate`)."""
        return bucket_estimate(self.run_times or {}, 0.5)

    @property
    def run_time_p95(self) -> timedelta | None:
        """The 95th percentile of :attr:`run_times`, a bucket estimate."""
        return bucket_estimate(self.run_times or {}, 0.95)

    @property
    def total(self) -> int:
        """Jobs of the function stored now."""
        return sum(self.jobs_by_state.values())


def catalog_total(label: str, entries: Sequence[CatalogEntry]) -> CatalogEntry:
    """The figures of ``entries`` together, as one entry named ``label`` (a tag's total):
    counts and run-time buckets summed, the newest last error of them all, their tags."""
    by_state: Counter[JobState] = Counter(dict.fromkeys(JobState, 0))
    runs: Counter[int] = Counter()
    for entry in entries:
        by_state.update(entry.jobs_by_state)
        runs.update(entry.run_times or {})
    errors = [entry for entry in entries if entry.last_error_job is not None]
    newest = max(errors, key=_error_order, default=None)
    return CatalogEntry(
        target=label,
        jobs_by_state=dict(by_state),
        last_error=None if newest is None else newest.last_error,
        last_error_job=None if newest is None else newest.last_error_job,
        last_error_at=None if newest is None else newest.last_error_at,
        run_times=dict(runs),
        tags=tuple(sorted({tag for entry in entries for tag in entry.tags})),
    )


def _error_order(entry: CatalogEntry) -> tuple[datetime, bytes]:
    """Newest first as the job list orders: creation time, then the id's bytes."""
    assert entry.last_error_job is not None and entry.last_error_at is not None
    return entry.last_error_at, entry.last_error_job.bytes
