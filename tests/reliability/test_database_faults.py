"""Database faults under load, on a private PostgreSQL cluster the tests may restart.

- PostgreSQL restarted (fast and immediate shutdown) while workers drain a backlog;
- the workers' sessions terminated again and again while they drain one;
- completion writes failing for a while, the worker otherwise healthy;
- the jobs table locked, so the database hangs for every statement touching it;
- idempotency keys raced from many processes, some in transactions that roll back.

Workers are real ``manage.py millrace_worker`` processes under the harness's supervisor,
with 2 s leases renewed every 0.5 s; the harness's checkers audit every job after each
scenario. Sizes follow ``MILLRACE_RELIABILITY`` (:mod:`.harness.scale`). Every wait is
bounded. Needs the PostgreSQL 15 server binaries (``PG_BIN``); skipped without them,
except in CI, where that fails.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from itertools import pairwise
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from django.db import OperationalError, connections

from millrace_django.clock import SystemClock
from millrace_django.contract import ClaimRequest, JobState
from millrace_django.engine import EngineSettings, JobClient, Retry
from millrace_django.models import JOB_STATE_CODES
from millrace_django.storage.orm import DjangoStorage
from tests.reliability.faults import (
    BLOCKED_MESSAGE,
    WORKER_APPLICATION,
    CompletionBlocker,
    TableLock,
    connect,
    terminate_backends,
    worker_sessions,
)
from tests.reliability.harness import jobs, journal
from tests.reliability.harness.processes import REPO, ManagePy, wait_until
from tests.reliability.harness.rig import Rig
from tests.reliability.harness.scale import FAST, SCALE
from tests.reliability.harness.supervisor import process_environment, wait_for_exit
from tests.reliability.pgcluster import PG_BIN, PgCluster, ShutdownMode, django_alias, migrate
from tests.reliability.scenarios import enqueue_work, stop_all, terminal

pytestmark = [pytest.mark.postgres]

ALIAS = "faults"
"""The private cluster's alias in this process."""
WORKER_DATABASE = {"OPTIONS": {"application_name": WORKER_APPLICATION}}
"""Worker sessions carry a name, so faults aimed at them spare the test's own."""
LEASE = timedelta(seconds=FAST["LEASE"])


@dataclass(frozen=True, slots=True, kw_only=True)
class Sizes:
    backlog: int
    """Jobs drained while PostgreSQL restarts or sessions are terminated."""
    job_seconds: float
    workers: int
    restarts: int
    terminations: int
    blocked_jobs: int
    blocked_leases: int
    """How many lease lengths completion writes stay blocked."""
    racers: int
    keys: int


SIZES = {
    "ci": Sizes(
        backlog=1200,
        job_seconds=0.02,
        workers=2,
        restarts=2,
        terminations=4,
        blocked_jobs=4,
        blocked_leases=3,
        racers=6,
        keys=60,
    ),
    "full": Sizes(
        backlog=8000,
        job_seconds=0.01,
        workers=4,
        restarts=6,
        terminations=20,
        blocked_jobs=16,
        blocked_leases=6,
        racers=8,
        keys=400,
    ),
}[SCALE.name]

DOWN_SECONDS = 1.0
"""How long PostgreSQL stays down at each restart."""
DRAIN_SECONDS = 120.0
"""Bound on any backlog's drain."""
SUCCEEDED = JOB_STATE_CODES[JobState.SUCCEEDED]
RETRY_PAUSE = re.compile(r"retrying \d+ in ([\d.]+) s")
GIVEN_UP = "given up at the end of its lease"
LOG_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) \w+ \[\d+\] ([\w.]+): (.*)$")


# -- fixtures ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PgCluster]:
    if not (PG_BIN / "pg_ctl").exists():
        reason = f"no PostgreSQL server binaries in {PG_BIN} (set PG_BIN)"
        if os.environ.get("CI"):
            pytest.fail(f"{reason}; CI must run the database-fault scenarios", pytrace=False)
        pytest.skip(reason)
    created = PgCluster.create()
    try:
        migrate(created.url, tmp_path_factory.mktemp("migrate"))
        yield created
    finally:
        created.destroy()


@pytest.fixture
def database(cluster: PgCluster, django_db_blocker: Any) -> Iterator[PgCluster]:
    """The cluster, up, its millrace tables empty, and known here as :data:`ALIAS`."""
    if not cluster.accepting():
        cluster.start()
    with connect(cluster.url) as connection:
        connection.execute(
            "DO $$ BEGIN EXECUTE (SELECT 'TRUNCATE ' || string_agg(quote_ident(tablename), ', ')"
            " FROM pg_tables WHERE schemaname = 'public' AND tablename LIKE 'millrace%'); END $$"
        )
    with django_db_blocker.unblock(), django_alias(ALIAS, cluster.url):
        yield cluster


@pytest.fixture
def client(database: PgCluster) -> JobClient:
    """Enqueues into the cluster, as the application would (overrides the conftest's)."""
    clock = SystemClock()
    config = EngineSettings(queues=frozenset({"default"}), default_retry=Retry.none())
    return JobClient(DjangoStorage(ALIAS, clock), clock, config)


@pytest.fixture
def rig(database: PgCluster, tmp_path: Path) -> Iterator[Rig]:
    """The harness on the cluster (overrides the conftest's)."""
    opened = Rig.open(database.url, tmp_path, database=WORKER_DATABASE)
    yield opened
    opened.close()


# -- helpers -----------------------------------------------------------------------------


def start_workers(rig: Rig, count: int) -> list[ManagePy]:
    """``count`` supervised workers (slots ``worker-1``...), once each is claiming."""
    names = [f"worker-{n}" for n in range(1, count + 1)]
    for name in names:
        rig.supervisor.worker(name, "--concurrency=4")
    return [rig.supervisor.wait_started(name) for name in names]


def succeeded(url: str) -> int:
    with connect(url) as connection:
        row = connection.execute(
            "SELECT count(*) FROM millrace_job WHERE state = %s", [SUCCEEDED]
        ).fetchone()
    return int(row[0]) if row else 0


def wait_for_successes(url: str, count: int, timeout: float = DRAIN_SECONDS) -> None:
    wait_until(lambda: succeeded(url) >= count, timeout, f"{count} successes")


LISTENER_RECONNECT_SECONDS = 15.0


def assert_rode_it_out(rig: Rig, workers: list[ManagePy], since: float) -> None:
    """Every worker is the process first started (never restarted), still runs,
    finished jobs after ``since`` (``time.monotonic()``) and heard wake-ups again."""
    assert rig.supervisor.restarts == 0, rig.supervisor.logs()
    assert [slot.process.pid for slot in rig.supervisor.slots()] == [w.pid for w in workers]
    assert all(worker.running() for worker in workers), rig.supervisor.logs()
    working = {event.pid for event in rig.ledger.events("finish") if event.monotonic > since}
    assert working == {worker.pid for worker in workers}
    # The listener retries with a growing pause (notify.LONGEST_RETRY_SECONDS at most),
    # so its reconnection may come after the last job of the backlog succeeded.
    for worker in workers:
        try:
            worker.wait_for_log("wake-up listener reconnected", LISTENER_RECONNECT_SECONDS)
        except AssertionError as error:
            told = [line for line in worker.log().splitlines() if "wake-up" in line]
            raise AssertionError("\n".join([str(error), *told])) from None


def log_lines(worker: ManagePy, text: str) -> list[tuple[datetime, str]]:
    """``(when, message)`` of the worker's log lines whose message contains ``text``."""
    found = []
    for line in worker.log().splitlines():
        match = LOG_LINE.match(line)
        if match and text in match.group(3):
            when = datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f").astimezone()
            found.append((when, match.group(3)))
    return found


# -- scenarios ---------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["fast", "immediate"])
def test_workers_ride_out_postgresql_restarts_under_load(
    mode: ShutdownMode, database: PgCluster, rig: Rig, client: JobClient
) -> None:
    ids = enqueue_work(client, SIZES.backlog, SIZES.job_seconds)
    connections[ALIAS].close()  # the server is about to go away under it
    workers = start_workers(rig, SIZES.workers)
    for n in range(1, SIZES.restarts + 1):
        wait_for_successes(database.url, n * len(ids) // (SIZES.restarts + 2))
        database.restart(mode, down_for=DOWN_SECONDS)
    last_fault = time.monotonic()

    wait_for_successes(database.url, len(ids))
    assert_rode_it_out(rig, workers, last_fault)
    assert stop_all(rig) == [0] * len(workers)
    rig.check(terminal(ids)).assert_clean()


def test_workers_ride_out_their_sessions_being_terminated_under_load(
    database: PgCluster, rig: Rig, client: JobClient
) -> None:
    ids = enqueue_work(client, SIZES.backlog, SIZES.job_seconds)
    workers = start_workers(rig, SIZES.workers)
    pids = {worker.pid for worker in workers}
    terminated = []
    for n in range(1, SIZES.terminations + 1):
        wait_for_successes(database.url, n * len(ids) // (SIZES.terminations + 2))
        # A worker holds no session from a round until it reconnects (its listener may
        # be pausing between attempts), so each round waits for every worker to hold one.
        wait_until(
            lambda: set(worker_sessions(database.url)) == pids,
            LISTENER_RECONNECT_SECONDS,
            "every worker holding a session again",
        )
        terminated.append(terminate_backends(database.url))
    last_fault = time.monotonic()

    # Each round hit every worker's sessions.
    assert all(set(hit) == pids for hit in terminated), (pids, terminated)
    wait_for_successes(database.url, len(ids))
    assert_rode_it_out(rig, workers, last_fault)
    assert stop_all(rig) == [0] * len(workers)
    rig.check(terminal(ids)).assert_clean()


def test_completions_that_cannot_be_written_are_retried_until_the_lease_ends_then_rerun(
    database: PgCluster, rig: Rig, client: JobClient
) -> None:
    blocker = CompletionBlocker(database.url)
    blocker.install()
    try:
        blocker.block()
        blocked_at = time.monotonic()
        (worker,) = start_workers(rig, 1)
        ids = enqueue_work(client, SIZES.blocked_jobs, 0.1)

        def claims() -> dict[UUID, int]:
            steps = journal.steps(database.url)
            return {
                job: sum(step.target is JobState.PROCESSING for step in steps.get(job, []))
                for job in ids
            }

        # Every job ran, could not be completed, lost its lease and was claimed again.
        wait_until(
            lambda: min(claims().values()) >= 2,
            SIZES.blocked_leases * LEASE.total_seconds() + 10,
            "every job claimed again while its completion was blocked",
        )
        time.sleep(
            max(0.0, blocked_at + SIZES.blocked_leases * LEASE.total_seconds() - time.monotonic())
        )
        # ...and each job's first completion given up (at the acknowledger's first retry
        # after its lease ended, which a loaded machine can put after that sleep).
        wait_until(
            lambda: all(
                any(str(job) in message for _, message in log_lines(worker, GIVEN_UP))
                for job in ids
            ),
            2 * LEASE.total_seconds() + 10,
            "every job's first completion given up",
        )
        assert succeeded(database.url) == 0
        blocker.unblock()
        wait_for_successes(database.url, len(ids), 30)
    finally:
        blocker.uninstall()

    assert rig.supervisor.restarts == 0 and worker.running()  # healthy throughout
    assert stop_all(rig) == [0]
    report = rig.check(terminal(ids))
    report.assert_clean()
    assert report.counts["exit reclaimed"] >= len(ids)

    # Retried after pauses that double (each retry waited the pause it announced)...
    failures = log_lines(worker, "transitions failed")
    assert BLOCKED_MESSAGE in worker.log()
    assert any("(3 in a row)" in message for _, message in failures), worker.log()[-3000:]
    for (failed, message), (next_failed, _) in pairwise(failures):
        pause = float(RETRY_PAUSE.search(message).group(1))  # type: ignore[union-attr]
        assert (next_failed - failed).total_seconds() >= pause - 0.01, (message, next_failed)
    # ...until the claim's lease ended, then given up; and that lease was renewed for at
    # most one lease after the job returned, so it ended within two (a live heartbeat
    # kept no dead claim alive for good: Solid Queue #748).
    given_up = log_lines(worker, GIVEN_UP)
    finishes = {(e.job_id, e.attempt): e.wall for e in rig.ledger.events("finish")}
    for job_id in ids:
        first_reclaim = next(
            step
            for step in journal.steps(database.url)[job_id]
            if step.source is JobState.PROCESSING and step.target is JobState.PROCESSING
        )
        assert first_reclaim.old_lease is not None
        returned = datetime.fromtimestamp(finishes[job_id, first_reclaim.old_attempt or 0], UTC)
        assert first_reclaim.old_lease <= returned + 2 * LEASE + timedelta(milliseconds=50)
        abandoned = [when for when, message in given_up if str(job_id) in message]
        assert abandoned, f"job {job_id} was never given up"
        assert abandoned[0] >= first_reclaim.old_lease - timedelta(milliseconds=100)


STATEMENT_TIMEOUT = 1.0
"""Seconds; the bound of every statement in the lock scenario."""
SHUTDOWN_TIMEOUT = 5.0


def test_a_locked_jobs_table_fails_every_call_within_the_statement_timeout(
    database: PgCluster, rig: Rig, client: JobClient
) -> None:
    rig.configure(
        {"STATEMENT_TIMEOUT": STATEMENT_TIMEOUT, "SHUTDOWN_TIMEOUT": SHUTDOWN_TIMEOUT},
        WORKER_DATABASE,
    )
    stays, stops = start_workers(rig, 2)
    ids = enqueue_work(client, SIZES.backlog // 2, 0.05)
    wait_for_successes(database.url, len(ids) // 10)
    timeout = timedelta(seconds=STATEMENT_TIMEOUT)
    storage = DjangoStorage(ALIAS, SystemClock(), statement_timeout=timeout)
    calls: dict[str, Callable[[], object]] = {
        "claim": lambda: storage.claim(
            ClaimRequest(worker_id="test", queues=frozenset({"default"}), max_count=1, lease=LEASE)
        ),
        "renew": lambda: storage.renew_leases("test", ids[:10], LEASE),
        "read": lambda: storage.get_job(ids[-1]),
        "enqueue": lambda: storage.enqueue(
            [client.build(jobs.work, (0.0,), {}, state=JobState.ENQUEUED, key=None)]
        ),
    }

    with TableLock(database.url):
        locked_at, locked_wall = time.monotonic(), datetime.now(UTC)
        # A graceful stop completes while the database hangs: the claim in flight ends
        # within its timeout, finished jobs whose completion cannot be written are given
        # up at their lease's end (before the shutdown timeout), the rest is bounded.
        stops_signalled = time.monotonic()
        rig.supervisor.stop("worker-2")
        code = wait_for_exit(stops, SHUTDOWN_TIMEOUT + STATEMENT_TIMEOUT + 5)
        stop_took = time.monotonic() - stops_signalled
        # Every storage call fails, within the statement timeout (and not before it).
        took = {}
        for name, call in calls.items():
            started = time.monotonic()
            with pytest.raises(OperationalError, match="statement timeout"):
                call()
            took[name] = time.monotonic() - started
        connections[ALIAS].close()
        # The other worker keeps trying, each claim failing within the same bound.
        wait_until(lambda: len(claim_failures(stays, locked_wall)) >= 3, 10, "3 failed claims")
        failed_claims = claim_failures(stays, locked_wall)
        assert stays.running()
        held_for = time.monotonic() - locked_at

    assert code == 0, stops.log()[-3000:]
    assert stop_took <= SHUTDOWN_TIMEOUT + STATEMENT_TIMEOUT, stop_took
    assert all(STATEMENT_TIMEOUT <= t < STATEMENT_TIMEOUT + 0.5 for t in took.values()), took
    gaps = [(b - a).total_seconds() for a, b in pairwise(failed_claims)]
    poll_max = FAST["POLL_MAX"]
    assert all(g <= STATEMENT_TIMEOUT + poll_max + 0.5 for g in gaps), gaps
    assert "canceling statement due to statement timeout" in stays.log()
    assert held_for > stop_took

    # Released: the remaining worker drains everything; nothing is lost.
    released = time.monotonic()
    wait_for_successes(database.url, len(ids))
    assert rig.supervisor.restarts == 0 and stays.running()
    assert any(e.pid == stays.pid and e.monotonic > released for e in rig.ledger.events("finish"))
    assert stop_all(rig) == [0, 0]  # the one stopped earlier, and this one
    rig.check(terminal(ids)).assert_clean()


def claim_failures(worker: ManagePy, since: datetime) -> list[datetime]:
    return [when for when, _ in log_lines(worker, "claim failed") if when >= since]


def test_idempotency_keys_raced_from_many_processes_hold_one_active_job_each(
    database: PgCluster, tmp_path: Path
) -> None:
    keys = [f"key-{n}" for n in range(SIZES.keys)]
    keys += [f"rollback-{n}" for n in range(SIZES.keys // 5)]  # only ever rolled back
    environment = process_environment(database.url, tmp_path / "ledger")
    racers = []
    for seed in range(SIZES.racers):
        with (tmp_path / f"racer-{seed}.log").open("wb") as log:
            racers.append(
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "tests.reliability.key_racer",
                        str(tmp_path),
                        str(seed),
                        "0.3",
                        *keys,
                    ],
                    cwd=REPO,
                    env=environment,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            )
    try:
        wait_until(
            lambda: len(list(tmp_path.glob("ready-*"))) == len(racers), 60, "every racer ready"
        )
        (tmp_path / "go").touch()
        codes = [racer.wait(120) for racer in racers]
    finally:
        for racer in racers:
            racer.kill()
    logs = "\n".join((tmp_path / f"racer-{n}.log").read_text() for n in range(len(racers)))
    assert codes == [0] * len(racers), logs

    outcomes: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for path in tmp_path.glob("outcomes-*.jsonl"):
        for line in path.read_text().splitlines():
            outcome = json.loads(line)
            outcomes[outcome["key"]].append(outcome)
    every = [o for found in outcomes.values() for o in found]
    assert len(every) == len(racers) * len(keys)
    assert [o for o in every if "error" in o] == []  # a duplicate is an answer, not an error
    with connect(database.url) as connection:
        rows = connection.execute(
            "SELECT idempotency_key, uuid::text, state FROM millrace_job"
        ).fetchall()
    held: dict[str, list[str]] = defaultdict(list)
    for key, job_id, state in rows:
        held[key].append(job_id)
        assert state == JOB_STATE_CODES[JobState.ENQUEUED]
    for key in keys:
        committed = [o for o in outcomes[key] if o["mode"] != "rollback"]
        if not committed:
            assert held[key] == [], f"{key}: only rolled back, yet stored {held[key]}"
            continue
        assert len(held[key]) == 1, f"{key}: {len(held[key])} active jobs"
        assert {o["id"] for o in committed} == set(held[key]), key  # all got the holder
        assert sum(o["new"] for o in committed) == 1, key  # which exactly one call stored
    rolled_back = {o["id"] for o in every if o["mode"] == "rollback" and o["new"]}
    assert rolled_back.isdisjoint(job_id for _, job_id, _ in rows)
    # The race really happened: keys held by a transaction that rolled back, and
    # duplicates answered with the holder.
    assert rolled_back and any(not o["new"] for o in every if o["mode"] != "rollback")
