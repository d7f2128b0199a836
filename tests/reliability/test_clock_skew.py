"""Clock skew: a worker on a machine whose clock is an hour off neither takes a healthy
worker's live leases nor loses its own, and its scheduler fires nothing early.

The skewed worker is a real ``millrace_worker`` process whose source of time
(``MILLRACE['CLOCK']``) is the system clock shifted by an hour, as on a machine without
NTP; everything else is production code. With ``CLOCK_SYNC`` (the default) it measures
its offset to PostgreSQL's clock and corrects for it. Each scenario also runs with
``CLOCK_SYNC`` off, to show the harm the correction prevents: without it, the same
steps run every long job twice.

The journal's timestamps are PostgreSQL's own clock, so the checkers judge "reclaimed
before its lease ended" in database time, whatever the workers' clocks say.
"""

from __future__ import annotations

from datetime import timedelta
from uuid import UUID

import pytest

from millrace_django.contract import JobState
from millrace_django.engine import JobClient
from millrace_django.models import JOB_STATE_CODES, JOB_STATES, Job
from tests.reliability.harness import jobs
from tests.reliability.harness.checkers import Report
from tests.reliability.harness.processes import wait_until
from tests.reliability.harness.rig import Rig
from tests.reliability.harness.scale import FAST, SCALE
from tests.reliability.scenarios import ALIAS, enqueue_work, postgres_marks, stop_all, terminal

pytestmark = postgres_marks()

LONG_JOBS = 3
"""Fewer than a worker's ``CONCURRENCY`` (4): one claim takes them all."""
LONG_JOB_SECONDS = SCALE.long_job_lease_periods * float(FAST["LEASE"])
AN_HOUR_AHEAD = "tests.reliability.skewed_clocks.an_hour_ahead"
AN_HOUR_BEHIND = "tests.reliability.skewed_clocks.an_hour_behind"

calibration = pytest.mark.parametrize(
    "clock_sync", [True, False], ids=["calibrated", "uncalibrated"]
)


@calibration
def test_a_worker_an_hour_fast_takes_no_live_lease_and_fires_nothing_early(
    client: JobClient, rig: Rig, clock_sync: bool
) -> None:
    rig.supervisor.worker("healthy")
    healthy = rig.supervisor.wait_started("healthy")
    ids = enqueue_work(client, LONG_JOBS, LONG_JOB_SECONDS)
    later = client.schedule(jobs.work, 0.0, delay=timedelta(minutes=10))
    _wait_running(rig, ids, "the healthy worker")

    rig.configure({"CLOCK": AN_HOUR_AHEAD, "CLOCK_SYNC": clock_sync})
    rig.supervisor.start("fast", "millrace_worker")  # with its scheduler
    fast = rig.supervisor.wait_started("fast")
    _assert_leases_still_live(rig, ids)
    _wait_succeeded(ids)
    assert stop_all(rig) == [0, 0]

    if clock_sync:
        report = rig.check({**terminal(ids), later: JobState.SCHEDULED})
        report.assert_clean()
        _assert_each_ran_once_in(report, ids, healthy.pid)
        assert "ahead of the database's" in fast.log()
    else:
        report = rig.check(terminal(ids), others=JobState.SUCCEEDED)
        early = [job for job in ids if _reclaimed_early(report, job)]
        assert early == ids, report.findings  # each live lease, taken ~1 h early
        assert _state(later) is JobState.SUCCEEDED  # activated 10 minutes early, and run


@calibration
def test_a_worker_an_hour_slow_keeps_its_live_leases(
    client: JobClient, rig: Rig, clock_sync: bool
) -> None:
    rig.configure({"CLOCK": AN_HOUR_BEHIND, "CLOCK_SYNC": clock_sync})
    rig.supervisor.worker("slow")
    slow = rig.supervisor.wait_started("slow")
    ids = enqueue_work(client, LONG_JOBS, LONG_JOB_SECONDS)
    _wait_running(rig, ids, "the slow worker")

    rig.configure({})
    rig.supervisor.worker("healthy")
    rig.supervisor.wait_started("healthy")
    _assert_leases_still_live(rig, ids)
    _wait_succeeded(ids)
    assert stop_all(rig) == [0, 0]

    report = rig.check(terminal(ids))
    if clock_sync:
        report.assert_clean()
        _assert_each_ran_once_in(report, ids, slow.pid)
        assert "behind the database's" in slow.log()
    else:
        # Its leases were written an hour in the past: taken at once, each job run twice
        # (the checkers see lawful reclaims of expired leases, fenced as they should be).
        report.assert_clean()
        assert report.counts["exit reclaimed"] == LONG_JOBS
        assert report.counts["executions"] == 2 * LONG_JOBS


def _wait_running(rig: Rig, ids: list[UUID], who: str) -> None:
    wait_until(lambda: rig.ledger.started_jobs() >= set(ids), 30, f"{who} running every job")


def _assert_leases_still_live(rig: Rig, ids: list[UUID]) -> None:
    """The second worker claims while the long jobs still run: the scenario's window."""
    ended = [e for e in rig.ledger.finished() if e.job_id in ids]
    assert ended == [], "a long job ended before the second worker ran"


def _wait_succeeded(ids: list[UUID]) -> None:
    succeeded = Job.objects.using(ALIAS).filter(
        uuid__in=ids, state=JOB_STATE_CODES[JobState.SUCCEEDED]
    )
    wait_until(
        lambda: succeeded.count() == len(ids),
        3 * LONG_JOB_SECONDS + 30,
        "every long job's success",
    )


def _assert_each_ran_once_in(report: Report, ids: list[UUID], pid: int) -> None:
    runs = [(e.job_id, e.attempt, e.pid) for job in ids for e in report.audits[job].executions]
    assert sorted(runs) == sorted((job, 1, pid) for job in ids)
    assert report.counts["exit reclaimed"] == 0


def _reclaimed_early(report: Report, job_id: UUID) -> bool:
    findings = report.audits[job_id].findings
    return any("reclaimed before its lease ended" in finding for finding in findings)


def _state(job_id: UUID) -> JobState:
    return JOB_STATES[Job.objects.using(ALIAS).get(uuid=job_id).state]
