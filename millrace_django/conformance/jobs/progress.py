"""Facts for progress and log lines reported by a running job (fenced writes)."""

from __future__ import annotations

from datetime import timedelta
from typing import ClassVar

from millrace_django.clock import FakeClock
from millrace_django.conformance.harness import StoreUnderTest
from millrace_django.conformance.suite import FactGroup
from millrace_django.conformance.support import (
    claim_one,
    enqueue,
    job_details,
    stored_job,
    succeed,
)
from millrace_django.contract import LOG_LINE_CAP, JobLogLine, ProgressReport
from millrace_django.contract.records import JobRecord


def _report(job: JobRecord, **fields: object) -> ProgressReport:
    assert job.worker_id is not None
    return ProgressReport(
        job_id=job.id,
        worker_id=job.worker_id,
        attempt=job.attempt,
        **fields,  # type: ignore[arg-type]
    )


class ProgressFacts(FactGroup):
    heading: ClassVar[str] = "Progress and logs"

    def test_a_running_job_stores_its_progress_and_log_lines(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """A fenced report stores the progress and appends the lines in order."""
        enqueue(store, clock)
        job = claim_one(store)
        first = JobLogLine(at=clock.now(), message="started ✓")
        assert store.jobs.report_progress(_report(job, progress=0.25, logs=[first])) is True
        clock.advance(timedelta(seconds=3))
        second = JobLogLine(at=clock.now(), message="halfway")
        report = _report(job, progress={"done": 5, "of": 10}, logs=[second])
        assert store.jobs.report_progress(report) is True

        details = job_details(store, job.id)
        assert details.progress == {"done": 5, "of": 10}
        assert list(details.logs) == [first, second]
        assert stored_job(store, job.id).progress == {"done": 5, "of": 10}

    def test_a_report_without_progress_keeps_the_stored_progress(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Log lines alone leave the last reported progress in place."""
        enqueue(store, clock)
        job = claim_one(store)
        assert store.jobs.report_progress(_report(job, progress=0.5)) is True
        line = JobLogLine(at=clock.now(), message="still going")
        assert store.jobs.report_progress(_report(job, logs=[line])) is True
        details = job_details(store, job.id)
        assert details.progress == 0.5
        assert list(details.logs) == [line]

    def test_a_report_from_a_stale_owner_is_rejected_and_stores_nothing(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Wrong worker or attempt, or a job no longer running: False and no change."""
        enqueue(store, clock)
        job = claim_one(store)
        line = JobLogLine(at=clock.now(), message="zombie")
        wrong_worker = ProgressReport(
            job_id=job.id, worker_id="w2", attempt=job.attempt, progress=1.0, logs=[line]
        )
        wrong_attempt = ProgressReport(
            job_id=job.id, worker_id="w1", attempt=job.attempt + 1, progress=1.0, logs=[line]
        )
        assert store.jobs.report_progress(wrong_worker) is False
        assert store.jobs.report_progress(wrong_attempt) is False
        assert store.jobs.apply(succeed(job, clock)) is True
        assert store.jobs.report_progress(_report(job, progress=1.0, logs=[line])) is False
        details = job_details(store, job.id)
        assert details.progress is None
        assert list(details.logs) == []

    def test_only_the_newest_log_lines_are_kept(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """A chatty job keeps its newest LOG_LINE_CAP lines, oldest first."""
        enqueue(store, clock)
        job = claim_one(store)
        lines = [
            JobLogLine(at=clock.now() + timedelta(seconds=n), message=f"line {n}")
            for n in range(LOG_LINE_CAP + 25)
        ]
        assert store.jobs.report_progress(_report(job, logs=lines[:30])) is True
        assert store.jobs.report_progress(_report(job, logs=lines[30:])) is True
        assert list(job_details(store, job.id).logs) == lines[-LOG_LINE_CAP:]

    def test_progress_and_logs_outlive_the_run_and_go_with_a_purge(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """A finished job still shows its report; purging it removes the report too."""
        enqueue(store, clock)
        job = claim_one(store)
        line = JobLogLine(at=clock.now(), message="done")
        assert store.jobs.report_progress(_report(job, progress=1.0, logs=[line])) is True
        assert store.jobs.apply(succeed(job, clock)) is True
        details = job_details(store, job.id)
        assert (details.progress, list(details.logs)) == (1.0, [line])
        clock.advance(timedelta(days=1))
        assert store.jobs.purge_finished(clock.now(), 10) == 1
        assert store.monitoring.get_job_details(job.id) is None
