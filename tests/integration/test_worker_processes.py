"""Real ``millrace_worker`` and ``millrace_scheduler`` processes against PostgreSQL.

Each test starts ``manage.py`` processes on this run's test database and checks what
happened twice: in the jobs table, and in an execution ledger the jobs append to outside
the database. Leases are 2 s and heartbeats 0.5 s (``processes.FAST``), so recovery
takes seconds; every wait polls with a deadline.

Configured by MILLRACE_TEST_POSTGRES_URL (``scripts/testdb.sh`` starts a throwaway server);
skipped when unset, except in CI, where it fails.
"""

from __future__ import annotations

import signal
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import quote
from uuid import UUID

import pytest
from django.db import connections

from millrace_django.clock import SystemClock
from millrace_django.contract import JobState
from millrace_django.engine import EngineSettings, JobClient, Retry
from millrace_django.models import JOB_STATE_CODES, JOB_STATES, Job, Recurring
from millrace_django.storage.orm import DjangoStorage
from tests.conformance.django_harness import require_alias
from tests.integration import ledger_jobs
from tests.integration.processes import (
    Ledger,
    ManagePy,
    Processes,
    session_members,
    wait_until,
)

ALIAS = "postgres"
require_alias(ALIAS, "MILLRACE_TEST_POSTGRES_URL")
pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True, databases=[ALIAS])]

STARTED = "started: queues"
"""What a worker logs once it is claiming."""


@pytest.fixture
def client() -> JobClient:
    """Enqueues into the test database, as the application would."""
    clock = SystemClock()
    config = EngineSettings(queues=frozenset({"default"}), default_retry=Retry.none())
    return JobClient(DjangoStorage(ALIAS, clock), clock, config)


@pytest.fixture
def ledger(tmp_path: Path) -> Ledger:
    return Ledger(tmp_path / "ledger.txt")


@pytest.fixture
def processes(ledger: Ledger, tmp_path: Path) -> Iterator[Processes]:
    started = Processes(_database_url(), ledger, tmp_path)
    yield started
    started.close()  # before the test database is emptied
    connections[ALIAS].close()


def _database_url() -> str:
    """The test database (not the configured one): what the processes must open."""
    s = connections[ALIAS].settings_dict
    credentials = f"{quote(s['USER'], safe='')}:{quote(s['PASSWORD'], safe='')}"
    return f"postgres://{credentials}@{s['HOST']}:{s['PORT']}/{s['NAME']}"


def two_claiming_workers(processes: Processes) -> list[ManagePy]:
    """Two workers of one thread each, both claiming (booting one can take longer than a
    job under load)."""
    workers = [processes.start("millrace_worker", "--concurrency=1") for _ in range(2)]
    for worker in workers:
        worker.wait_for_log(STARTED)
    return workers


def state(job_id: UUID) -> JobState:
    return JOB_STATES[Job.objects.using(ALIAS).get(uuid=job_id).state]


def job_row(job_id: UUID) -> Job:
    return Job.objects.using(ALIAS).get(uuid=job_id)


def test_a_job_whose_worker_was_killed_is_run_again_by_another_after_the_lease(
    client: JobClient, processes: Processes, ledger: Ledger
) -> None:
    # Both workers are up before the job exists (booting one can take longer than the
    # job under load); whichever claims it is killed, the other must wait out the lease.
    workers = two_claiming_workers(processes)
    job_id = client.enqueue(ledger_jobs.hold, 3.0)
    (started,) = wait_until(lambda: ledger.entries("start"), 30, "the job's first start")
    first, second = sorted(workers, key=lambda worker: worker.pid != started.pid)
    first.send(signal.SIGKILL)
    assert first.exit_code(10) == -signal.SIGKILL

    wait_until(lambda: state(job_id) is JobState.SUCCEEDED, 30, "the job's success")
    starts = ledger.entries("start")
    assert [(e.pid, e.attempt) for e in starts] == [(first.pid, 1), (second.pid, 2)]
    assert starts[1].at - starts[0].at >= 1.5  # not before the 2 s lease lapsed
    assert [(e.pid, e.job_id) for e in ledger.entries("done")] == [(second.pid, job_id)]
    row = job_row(job_id)
    assert (row.attempt, row.failures) == (2, 0)  # an interruption spends no retry budget


def test_sigterm_drains_the_running_job_claims_nothing_more_and_exits_0(
    client: JobClient, processes: Processes, ledger: Ledger
) -> None:
    worker = processes.start("millrace_worker", "--concurrency=1")
    running = client.enqueue(ledger_jobs.hold, 1.5)
    waiting = [client.enqueue(ledger_jobs.record, 0.0) for _ in range(3)]
    wait_until(lambda: ledger.entries("start"), 30, "the job's start")

    worker.send(signal.SIGTERM)
    assert worker.exit_code(20) == 0, worker.log()

    assert state(running) is JobState.SUCCEEDED  # drained, not released
    assert [e.job_id for e in ledger.entries("done")] == [running]
    assert [state(job_id) for job_id in waiting] == [JobState.ENQUEUED] * 3
    assert "stopped: 1 claimed (1 succeeded)" in worker.log()


def test_a_second_sigterm_releases_the_running_job_at_once_and_exits_0(
    client: JobClient, processes: Processes, ledger: Ledger
) -> None:
    worker = processes.start("millrace_worker", "--concurrency=1")
    job_id = client.enqueue(ledger_jobs.hold, 30.0)
    wait_until(lambda: ledger.entries("start"), 30, "the job's start")

    worker.send(signal.SIGTERM)
    worker.wait_for_log("graceful stop requested")
    worker.send(signal.SIGTERM)
    assert worker.exit_code(8) == 0, worker.log()  # well before SHUTDOWN_TIMEOUT (10 s)

    row = job_row(job_id)
    assert JOB_STATES[row.state] is JobState.ENQUEUED  # released for another worker
    assert (row.attempt, row.failures) == (1, 0)
    assert ledger.entries("done") == []


def test_three_racing_schedulers_fire_each_recurring_occurrence_exactly_once(
    client: JobClient, processes: Processes
) -> None:
    definitions = [f"race-{n}" for n in range(25)]
    for recurring_id in definitions:  # due next on 1 January: the test sets due times
        client.upsert_recurring(recurring_id, ledger_jobs.record, cron="0 0 1 1 *", args=[0.0])
    schedulers = [processes.start("millrace_scheduler") for _ in range(3)]
    for scheduler in schedulers:
        scheduler.wait_for_log("scheduler started")

    rounds = 4
    definitions_table = Recurring.objects.using(ALIAS).filter(id__in=definitions)
    for round_number in range(rounds):
        # A distinct past instant per round: each round is a new occurrence of all 25.
        due = datetime.now(UTC) - timedelta(seconds=1, milliseconds=round_number)
        definitions_table.update(next_fire_time=due)
        wait_until(
            lambda due=due: not definitions_table.filter(next_fire_time__lte=due).exists(),
            20,
            f"round {round_number + 1} of fires",
        )

    for scheduler in schedulers:  # a barrier: every pass in flight has ended
        scheduler.send(signal.SIGTERM)
    assert [scheduler.exit_code(20) for scheduler in schedulers] == [0, 0, 0]
    fired = Counter(
        Job.objects.using(ALIAS)
        .filter(recurring_id__in=definitions)
        .values_list("recurring_id", flat=True)
    )
    assert fired == dict.fromkeys(definitions, rounds)


def test_two_thousand_jobs_across_two_processes_of_four_threads_complete_once_each(
    client: JobClient, processes: Processes, ledger: Ledger
) -> None:
    total = 2000
    storage = client.storage
    for _ in range(total // 500):
        storage.enqueue(
            [
                client.build(ledger_jobs.record, (0.01,), {}, state=JobState.ENQUEUED, key=None)
                for _ in range(500)
            ]
        )
    parent = processes.start("millrace_worker", "--processes=2", "--concurrency=4")
    succeeded = JOB_STATE_CODES[JobState.SUCCEEDED]
    wait_until(
        lambda: Job.objects.using(ALIAS).filter(state=succeeded).count() == total,
        50,
        "2,000 successes",
    )

    parent.send(signal.SIGTERM)
    assert parent.exit_code(20) == 0, parent.log()
    assert "2 worker processes stopped cleanly" in parent.log()

    done = ledger.entries("done")
    assert len(done) == total
    assert len({entry.job_id for entry in done}) == total  # each completed exactly once
    workers = {entry.pid for entry in done}
    assert len(workers) == 2 and parent.pid not in workers
    attempts = Job.objects.using(ALIAS).values_list("attempt", flat=True)
    assert set(attempts) == {1}


def test_worker_processes_whose_parent_was_killed_stop_on_their_own(
    processes: Processes,
) -> None:
    parent = processes.start("millrace_worker", "--processes=2")
    wait_until(lambda: parent.log().count(STARTED) == 2, 30, "both children claiming")
    children = set(session_members(parent.pid)) - {parent.pid}
    assert len(children) == 2

    parent.send(signal.SIGKILL)
    assert parent.exit_code(10) == -signal.SIGKILL
    wait_until(lambda: not session_members(parent.pid), 20, "the orphaned children's exit")
    assert parent.log().count("parent process") == 2  # each noticed, and drained


def test_a_hanging_job_is_killed_at_its_hard_timeout_and_the_worker_keeps_draining(
    client: JobClient, processes: Processes, ledger: Ledger
) -> None:
    worker = processes.start("millrace_worker", "--concurrency=1")  # one thread to keep
    worker.wait_for_log(STARTED)
    hanging = client.enqueue(
        ledger_jobs.hold.using(hard_timeout=2, retry=Retry.fixed(timedelta(0), 2)), 600.0
    )
    wait_until(lambda: state(hanging) is JobState.DEAD, 60, "both attempts killed")
    draining = [client.enqueue(ledger_jobs.record, 0.0) for _ in range(5)]
    wait_until(
        lambda: all(state(job_id) is JobState.SUCCEEDED for job_id in draining), 30, "the drain"
    )

    row = job_row(hanging)
    assert (row.attempt, row.failures) == (2, 2)  # the retry policy applied, then dead
    assert row.last_error == "Killed after its hard timeout of 2 seconds."
    starts = ledger.entries("start")
    assert [(e.job_id, e.attempt) for e in starts] == [(hanging, 1), (hanging, 2)]
    children = {e.pid for e in starts}
    assert len(children) == 2 and worker.pid not in children  # a process per attempt
    assert row.finished_at is not None
    killed_after = row.finished_at.timestamp() - starts[1].at
    assert 1.9 <= killed_after < 6, killed_after  # the limit, not the job's 600 s
    assert not children & set(session_members(worker.pid))  # killed and reaped
    done = ledger.entries("done")
    assert sorted(e.job_id for e in done) == sorted(draining)  # the hanging job never finished
    assert {e.pid for e in done} == {worker.pid}  # on the worker's one thread
    assert worker.running()


def test_the_worker_keeps_renewing_the_lease_of_a_job_running_in_its_child_process(
    client: JobClient, processes: Processes, ledger: Ledger
) -> None:
    # The limit (4 s) outlasts the lease (2 s): without heartbeats while the child runs,
    # the second worker would reclaim the job and start it again before the kill.
    two_claiming_workers(processes)
    job_id = client.enqueue(ledger_jobs.hold.using(hard_timeout=4), 600.0)
    wait_until(lambda: state(job_id) is JobState.DEAD, 60, "the kill")

    (start,) = ledger.entries("start")  # one start: never reclaimed
    row = job_row(job_id)
    assert (row.attempt, row.failures) == (1, 1)
    assert row.finished_at is not None
    assert 3.9 <= row.finished_at.timestamp() - start.at < 8


def _steps(ledger: Ledger, kind: str, attempt: int) -> list[int]:
    """The numbers of the ``kind-N`` entries attempt ``attempt`` wrote, in order."""
    return [
        int(entry.event.removeprefix(f"{kind}-"))
        for entry in ledger.entries()
        if entry.event.startswith(f"{kind}-") and entry.attempt == attempt
    ]


def test_the_worker_that_reclaims_a_killed_job_resumes_from_its_last_checkpoint(
    client: JobClient, processes: Processes, ledger: Ledger
) -> None:
    workers = two_claiming_workers(processes)
    # 8 s of steps: the kill falls well within them, however loaded the machine is.
    job_id = client.enqueue(ledger_jobs.count_to, 40, 0.2)
    wait_until(lambda: len(_steps(ledger, "saved", 1)) >= 3, 60, "three checkpoints")
    (first_start,) = [e for e in ledger.entries() if e.event == "resumed-0"]
    first, second = sorted(workers, key=lambda worker: worker.pid != first_start.pid)
    first.send(signal.SIGKILL)
    assert first.exit_code(10) == -signal.SIGKILL
    saved_before_kill = _steps(ledger, "saved", 1)[-1]

    wait_until(lambda: state(job_id) is JobState.SUCCEEDED, 60, "the reclaimed job's success")
    (resumed,) = _steps(ledger, "resumed", 2)
    # The kill may fall between a stored checkpoint and its ledger line: one step ahead.
    assert resumed in (saved_before_kill, saved_before_kill + 1)
    assert _steps(ledger, "saved", 2) == list(range(resumed + 1, 41))
    row = job_row(job_id)
    assert (row.attempt, row.checkpoint, row.result) == (2, 40, resumed)
    assert {e.pid for e in ledger.entries() if e.attempt == 2} == {second.pid}
