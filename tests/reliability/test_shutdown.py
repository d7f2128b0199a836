"""Stopping workers: a graceful drain finishes what runs and exits 0; a forced stop
(a second signal, or the shutdown timeout running out) gives running jobs back, exits
0, and another worker runs them again: nothing lost, no retry budget spent."""

from __future__ import annotations

import signal
import time

import pytest

from millrace_django.contract import JobState
from millrace_django.engine import JobClient
from tests.reliability.harness.checkers import Exit, rows
from tests.reliability.harness.processes import wait_until
from tests.reliability.harness.rig import Rig
from tests.reliability.harness.scale import SCALE
from tests.reliability.harness.supervisor import wait_for_exit
from tests.reliability.scenarios import enqueue_work, postgres_marks, stop_all, terminal

pytestmark = postgres_marks()

CONCURRENCY = 4
FORCED_JOB_SECONDS = 6.0
FORCED_EXIT_SECONDS = 8.0
"""A forced stop exits well before SHUTDOWN_TIMEOUT (10 s) would let jobs finish."""


def test_sigterm_drains_running_jobs_exits_0_and_leaves_the_rest_to_the_next_worker(
    client: JobClient, rig: Rig
) -> None:
    ids = enqueue_work(client, SCALE.drain_jobs, 1.0)
    rig.supervisor.worker("drained", f"--concurrency={CONCURRENCY}")
    wait_until(lambda: len(rig.ledger.events("start")) >= CONCURRENCY, 30, "a full pool")
    drained = rig.supervisor.stop("drained")
    assert wait_for_exit(drained, 20) == 0, drained.log()
    ran_before = {e.job_id for e in rig.ledger.events("start")}
    assert ran_before == {e.job_id for e in rig.ledger.finished()}  # all drained
    assert ran_before < set(ids)  # and it claimed nothing new once told to stop

    rig.supervisor.worker("next", f"--concurrency={CONCURRENCY}")
    wait_until(lambda: len(rig.ledger.finished()) == len(ids), 60, "every job finished")
    assert stop_all(rig) == [0, 0]

    report = rig.check(terminal(ids))
    print(report.summary())
    report.assert_clean()
    assert report.counts["exit reclaimed"] == report.counts["unfinished executions"] == 0
    assert report.counts["executions"] == len(ids)  # each ran exactly once
    for audit in report.audits.values():
        # Claims that never started were given back, attempt and all (the checkers saw
        # that none of them ran); no claim ended released, charged an interruption.
        assert Exit.RELEASED not in audit.exits.values()
        assert audit.row is not None and audit.row.failures == 0


@pytest.mark.parametrize("how", ["second signal", "shutdown timeout"])
def test_a_forced_stop_releases_running_jobs_which_run_again_elsewhere(
    client: JobClient, rig: Rig, how: str
) -> None:
    if how == "shutdown timeout":
        rig.configure({"SHUTDOWN_TIMEOUT": 1, "SHUTDOWN_GRACE": 0.5})
    ids = enqueue_work(client, 2, FORCED_JOB_SECONDS)
    rig.supervisor.worker("forced", "--concurrency=2")
    wait_until(lambda: len(rig.ledger.events("start")) == 2, 30, "both jobs running")
    forced = rig.supervisor.stop("forced")
    stopped_at = time.monotonic()
    if how == "second signal":
        forced.wait_for_log("graceful stop requested")
        rig.supervisor.send("forced", signal.SIGTERM)
    assert wait_for_exit(forced, FORCED_EXIT_SECONDS) == 0, forced.log()
    assert time.monotonic() - stopped_at < FORCED_JOB_SECONDS - 1  # the jobs still ran
    assert rig.ledger.finished() == []
    stored = rows(rig.url)
    assert {stored[job_id].state for job_id in ids} == {JobState.ENQUEUED}  # given back

    rig.supervisor.worker("next", "--concurrency=2")
    wait_until(lambda: len(rig.ledger.finished()) == 2, 30, "both jobs finished")
    assert stop_all(rig) == [0, 0]

    report = rig.check(terminal(ids))
    print(report.summary())
    report.assert_clean()
    for job_id in ids:
        audit = report.audits[job_id]
        assert audit.exits == {1: Exit.RELEASED, 2: Exit.SUCCEEDED}
        assert [(e.attempt, e.pid, e.finished is None) for e in audit.executions] == [
            (1, forced.pid, True),  # interrupted: it ended with its process
            (2, audit.executions[1].pid, False),
        ]
        assert audit.row is not None and audit.row.failures == 0  # no budget spent
