"""Leases: a dead worker's job is taken back only once its lease has run out; a live
worker's long jobs are never taken back, however long they run; a worker frozen past
its lease loses the job, and its late completion is rejected by the fence.

Leases are 2 s, renewed every 0.5 s (``FAST``). Times compare the ledger's kill events
with the transition journal's reclaim rows (database time) and the old lease they
replaced.
"""

from __future__ import annotations

import signal
from datetime import UTC, datetime, timedelta

from millrace_django.contract import JobState
from millrace_django.engine import JobClient
from tests.reliability.harness.checkers import Exit
from tests.reliability.harness.processes import wait_until
from tests.reliability.harness.rig import Rig
from tests.reliability.harness.scale import FAST, SCALE
from tests.reliability.harness.supervisor import wait_for_exit
from tests.reliability.scenarios import enqueue_work, postgres_marks, stop_all, terminal

pytestmark = postgres_marks()

LEASE = timedelta(seconds=FAST["LEASE"])
RECLAIM_WITHIN = LEASE + timedelta(seconds=3)
"""Liveness: after the lease ends, a polling worker reclaims within a few seconds."""


def _wall(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, UTC)


def test_a_dead_workers_long_job_is_reclaimed_after_its_lease_and_live_long_jobs_never_are(
    client: JobClient, rig: Rig
) -> None:
    healthy_seconds = LEASE.total_seconds() * SCALE.long_job_lease_periods
    rig.supervisor.worker("doomed", "--concurrency=1")
    rig.supervisor.wait_started("doomed")
    (doomed,) = enqueue_work(client, 1, 3 * LEASE.total_seconds())
    wait_until(lambda: rig.ledger.events("start"), 30, "the doomed job's start")

    rig.supervisor.worker("healthy", f"--concurrency={SCALE.healthy_long_jobs + 1}")
    rig.supervisor.wait_started("healthy")
    healthy = enqueue_work(client, SCALE.healthy_long_jobs, healthy_seconds)
    wait_until(
        lambda: len(rig.ledger.events("start")) == 1 + SCALE.healthy_long_jobs,
        30,
        "the healthy jobs' starts",
    )
    rig.supervisor.retire("doomed")
    rig.supervisor.send("doomed", signal.SIGKILL)

    wait_until(
        lambda: len({e.job_id for e in rig.ledger.finished()}) == 1 + SCALE.healthy_long_jobs,
        60,
        "every job finished",
    )
    assert stop_all(rig)[1:] == [0]  # the healthy worker drained and exited 0

    report = rig.check(terminal([doomed, *healthy]))
    print(report.summary())
    report.assert_clean()
    (kill,) = rig.ledger.events("kill")
    audit = report.audits[doomed]
    assert audit.exits == {1: Exit.RECLAIMED, 2: Exit.SUCCEEDED}
    (reclaim,) = [s for s in audit.steps if s.source is s.target is JobState.PROCESSING]
    assert reclaim.old_lease is not None
    killed_at = _wall(kill.wall)
    # The lease was live at the kill, and the job was taken back only once it ended...
    assert timedelta(0) < reclaim.old_lease - killed_at <= LEASE
    assert reclaim.at >= reclaim.old_lease
    # ...and soon after (another worker was polling).
    assert reclaim.at - killed_at <= RECLAIM_WITHIN
    assert [(e.attempt, e.finished is None) for e in audit.executions] == [(1, True), (2, False)]

    for job_id in healthy:  # ran once, for several leases, never reclaimed
        audit = report.audits[job_id]
        assert audit.exits == {1: Exit.SUCCEEDED}
        (execution,) = audit.executions
        assert execution.finished is not None
        assert execution.finished - execution.started >= healthy_seconds


def test_a_worker_frozen_past_its_lease_loses_the_job_and_its_late_completion_is_rejected(
    client: JobClient, rig: Rig
) -> None:
    job_seconds = LEASE.total_seconds()  # over when it resumes: it completes at once
    rig.supervisor.worker("frozen", "--concurrency=1")
    frozen = rig.supervisor.wait_started("frozen")
    (job_id,) = enqueue_work(client, 1, job_seconds)
    wait_until(lambda: rig.ledger.events("start"), 30, "the first start")
    rig.supervisor.send("frozen", signal.SIGSTOP)

    rig.supervisor.worker("reclaimer", "--concurrency=1")
    reclaimer = rig.supervisor.wait_started("reclaimer")
    wait_until(lambda: len(rig.ledger.events("start")) == 2, 30, "the reclaimer's start")
    rig.supervisor.send("frozen", signal.SIGCONT)  # while the reclaimer still runs it
    wait_until(lambda: len(rig.ledger.finished()) == 2, 30, "both executions finished")
    assert stop_all(rig) == [0, 0]
    assert wait_for_exit(frozen, 1) == 0

    report = rig.check(terminal([job_id]))
    print(report.summary())
    report.assert_clean()
    audit = report.audits[job_id]
    assert audit.exits == {1: Exit.RECLAIMED, 2: Exit.SUCCEEDED}
    assert [(e.pid, e.attempt) for e in audit.executions] == [(frozen.pid, 1), (reclaimer.pid, 2)]
    assert all(e.finished is not None for e in audit.executions)
    assert audit.fenced_overlaps == 1  # accepted only because attempt 1 was reclaimed
    assert audit.row is not None
    assert audit.row.result == {"pid": reclaimer.pid, "attempt": 2}  # the reclaimer's
    rejected = (
        f"job {job_id} attempt 1: the claim moved on",  # its completion was fenced off
        f"lost the lease of job {job_id} (attempt 1)",  # or a heartbeat noticed first
    )
    assert any(text in frozen.log() for text in rejected), frozen.log()
    summary = frozen.log().splitlines()[-1]
    assert summary.endswith("stopped: 1 claimed") or "1 claimed; 1 lost to another" in summary
