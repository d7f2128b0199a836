"""Workers SIGKILLed under a steady backlog, and a poison job that kills its worker
every time it runs: nothing is lost, nothing completes twice.

Workers are real ``manage.py millrace_worker`` processes under the harness's supervisor,
which restarts the dead ones; leases are 2 s, renewed every 0.5 s.
"""

from __future__ import annotations

import signal
from functools import partial
from uuid import UUID

from millrace_django.contract import TERMINAL_JOB_STATES, JobState
from millrace_django.engine import JobClient
from tests.reliability.harness import jobs
from tests.reliability.harness.checkers import Exit, Report, rows
from tests.reliability.harness.processes import wait_until
from tests.reliability.harness.rig import Rig
from tests.reliability.harness.scale import SCALE
from tests.reliability.scenarios import enqueue_work, postgres_marks, stop_all, terminal

pytestmark = postgres_marks()

CHURN_JOB_SECONDS = 0.05


def test_sigkill_churn_under_a_steady_backlog_loses_nothing_and_completes_each_job_once(
    client: JobClient, rig: Rig
) -> None:
    rig.supervisor.max_restarts = SCALE.churn_kills
    ids = enqueue_work(client, SCALE.churn_jobs, CHURN_JOB_SECONDS)
    names = [f"worker-{n}" for n in range(SCALE.churn_workers)]
    for name in names:
        rig.supervisor.worker(name)
    every = SCALE.churn_jobs // (SCALE.churn_kills + 1)
    killed = []
    for kill in range(SCALE.churn_kills):
        wait_until(
            partial(_finished, rig, every * (kill + 1)),
            60,
            f"{every * (kill + 1)} jobs finished before kill {kill + 1}",
        )
        name = names[kill % len(names)]
        victim = rig.supervisor.wait_started(name)
        # Kill it mid-job: one of its executions has started and not finished.
        wait_until(partial(_running_in, rig, victim.pid), 30, f"a running job in {victim}")
        killed.append(rig.supervisor.kill(name).pid)

    succeeded = wait_until(
        lambda: len({e.job_id for e in rig.ledger.finished()}) >= SCALE.churn_jobs,
        120,
        f"all {SCALE.churn_jobs} jobs finished",
    )
    assert succeeded
    assert stop_all(rig) == [0] * len(names)

    report = rig.check(terminal(ids))
    print(report.summary())
    report.assert_clean()
    assert rig.supervisor.restarts == SCALE.churn_kills
    # Each kill interrupted at least one running job, recovered only by its lease.
    assert report.counts["exit reclaimed"] >= SCALE.churn_kills
    assert report.counts["exit succeeded"] == SCALE.churn_jobs
    assert report.counts["exit released"] == report.counts["exit failed"] == 0
    unfinished = [
        e for audit in report.audits.values() for e in audit.executions if e.finished is None
    ]
    assert {e.pid for e in unfinished} <= set(killed)  # only killed processes left runs
    assert report.counts["fenced overlaps"] == 0  # killed runs end at the kill


def _finished(rig: Rig, count: int) -> bool:
    return len(rig.ledger.finished()) >= count


def _running_in(rig: Rig, pid: int) -> bool:
    """Whether a job has started in process ``pid`` and not finished."""
    executions = rig.ledger.executions().values()
    return any(e.pid == pid and e.finished is None for runs in executions for e in runs)


def test_a_poison_job_that_kills_its_worker_every_time_ends_dead_while_the_rest_complete(
    client: JobClient, rig: Rig
) -> None:
    """The poison pill runs on a queue of its own, so no other job shares its worker."""
    limit = SCALE.poison_limit
    poison, bystanders = _poison_scenario(
        client, rig, limit=limit, bystanders=SCALE.poison_bystanders, alone=True
    )
    report = rig.check({poison: JobState.DEAD, **terminal(bystanders)})
    print(report.summary())
    report.assert_clean()
    _assert_poison_verdict(report, rig, poison, limit)


def test_jobs_claimed_together_with_a_poison_pill_are_not_judged_poison_with_it(
    client: JobClient, rig: Rig
) -> None:
    """One worker claims the poison pill with the backlog behind it; after each crash the
    next claim takes the expired ones back together (fixed sizes: the gap, not a load)."""
    poison, bystanders = _poison_scenario(client, rig, limit=2, bystanders=20, alone=False)
    report = rig.check({poison: JobState.DEAD, **terminal(bystanders)})
    print(report.summary())
    report.assert_clean()
    _assert_poison_verdict(report, rig, poison, 2)


def _poison_scenario(
    client: JobClient, rig: Rig, *, limit: int, bystanders: int, alone: bool
) -> tuple[UUID, list[UUID]]:
    """A poison pill then a backlog of ordinary jobs, run until all are terminal: alone,
    the pill has its own queue and worker and two workers run the rest; otherwise one
    worker runs everything."""
    rig.configure({"INTERRUPTION_LIMIT": limit, "QUEUES": ["default", "suspect"]})
    crash = jobs.crash.using(queue="suspect" if alone else "default")
    (poison,) = client.storage.enqueue(
        [client.build(crash, (), {}, state=JobState.ENQUEUED, key=None)]
    )
    others = enqueue_work(client, bystanders, CHURN_JOB_SECONDS)
    if alone:
        rig.supervisor.worker("suspect", "--queues=suspect", "--concurrency=1")
    for name in ("worker-0", "worker-1") if alone else ("worker-0",):
        rig.supervisor.worker(name, "--queues=default", "--concurrency=2")

    def settled() -> bool:
        stored = rows(rig.url)
        return all(stored[job_id].state in TERMINAL_JOB_STATES for job_id in [poison, *others])

    wait_until(settled, 60 + 10 * limit, "every job terminal")
    assert stop_all(rig) == [0] * len(rig.supervisor.slots())
    return poison, others


def _assert_poison_verdict(report: Report, rig: Rig, poison: UUID, limit: int) -> None:
    audit = report.audits[poison]
    # Ran (and killed its worker) `limit` times, then dead without running again.
    crashes = dict.fromkeys(range(1, limit + 1), Exit.RECLAIMED)
    assert audit.exits == {**crashes, limit + 1: Exit.POISON}
    assert [e.attempt for e in audit.executions] == list(range(1, limit + 1))
    assert all(e.finished is None for e in audit.executions)
    assert len({e.pid for e in audit.executions}) == limit  # a new process each time
    assert audit.row is not None and audit.row.failures == 0
    assert (audit.row.last_error or "").startswith(f"Poison-pill: claimed {limit + 1} times")
    # Each crash cost one worker, which the supervisor replaced; nothing else died.
    self_killed = [e for e in rig.ledger.events("exit") if e.attempt == -signal.SIGKILL]
    assert len(self_killed) == limit == rig.supervisor.restarts
    assert rig.ledger.events("kill") == []


def test_two_kills_of_one_worker_in_a_row_each_reach_a_live_process(rig: Rig) -> None:
    # Each kill waits for the replacement, so the second reaches it rather than the
    # first process lying dead until the supervisor's next look (which restarted once).
    rig.supervisor.max_restarts = 2
    rig.supervisor.worker("twice")
    first = rig.supervisor.wait_started("twice")
    assert rig.supervisor.kill("twice") is first
    second = rig.supervisor.kill("twice")
    assert second is not first
    assert rig.supervisor.restarts == 2
    assert stop_all(rig) == [0]
    rig.supervisor.check()
