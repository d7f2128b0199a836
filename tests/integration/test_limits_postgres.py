"""Global limits across real worker processes on PostgreSQL: 3 ``millrace_worker``
processes of 8 threads each drain jobs under a concurrency limit of 3, then under a rate
of 20/s.

The issue asks for 2,000 jobs; these drain 200 each, which keeps the rate test near 10 s
(2,000 at 20/s take 100 s) and still gives every worker many turns at the limit.

Overlap is read from the execution ledger (outside the database): a job writes ``start``
when its handler begins and ``done`` before it returns, so its ledger interval lies inside
its ``processing`` interval, and more than 3 overlapping there would mean more than 3
processing. Starts under the rate are read from the database itself: a limit's row keeps
the start instants of the last period, and polling it more often than once a period sees
every start (the ledger's start times add each worker's dispatch delay, so two claims
just over a second apart can land in the ledger just under a second apart).
"""

from __future__ import annotations

import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from uuid import UUID

import pytest

from millrace_django.contract import JobState, job_scope
from millrace_django.engine import JobClient
from millrace_django.models import JOB_STATE_CODES, Job, Limit
from tests.conformance.django_harness import require_alias
from tests.integration import ledger_jobs
from tests.integration.processes import Ledger, Processes, wait_until
from tests.integration.test_worker_processes import client, ledger, processes

ALIAS = "postgres"
require_alias(ALIAS, "MILLRACE_TEST_POSTGRES_URL")
pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True, databases=[ALIAS])]

JOBS = 200
WORKERS = 3
THREADS = "--concurrency=8"
STARTED = "started: queues"
HOLD = job_scope("tests.integration.ledger_jobs:hold")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


__all__ = ["client", "ledger", "processes"]  # the fixtures, shared


def start_workers(processes: Processes) -> None:
    workers = [processes.start("millrace_worker", THREADS) for _ in range(WORKERS)]
    for worker in workers:
        worker.wait_for_log(STARTED)


def succeeded(ids: list[UUID]) -> int:
    done = JOB_STATE_CODES[JobState.SUCCEEDED]
    return Job.objects.using(ALIAS).filter(uuid__in=ids, state=done).count()


def most_overlapping(ledger: Ledger) -> int:
    """The most jobs between their ``start`` and ``done`` at any instant (a ``done``
    sorts before a ``start`` at the same instant: that slot was already free)."""
    events = sorted([(entry.at, 0 if entry.event == "done" else 1) for entry in ledger.entries()])
    running = highest = 0
    for _, starting in events:
        running += 1 if starting else -1
        highest = max(highest, running)
    return highest


def test_three_worker_processes_never_run_more_than_a_global_limit_of_three(
    client: JobClient, processes: Processes, ledger: Ledger
) -> None:
    start_workers(processes)
    limited = ledger_jobs.hold.using(concurrency=3)
    ids = [client.enqueue(limited, 0.05) for _ in range(JOBS)]

    wait_until(lambda: succeeded(ids) == JOBS, 120, f"{JOBS} jobs to succeed")

    assert sorted(entry.job_id for entry in ledger.entries("start")) == sorted(ids)
    assert len({entry.pid for entry in ledger.entries("start")}) > 1, "one worker did it all"
    assert most_overlapping(ledger) == 3


def test_three_worker_processes_never_start_more_than_twenty_in_any_second(
    client: JobClient, processes: Processes, ledger: Ledger
) -> None:
    start_workers(processes)
    limited = ledger_jobs.hold.using(rate="20/s")
    began = time.monotonic()
    ids = [client.enqueue(limited, 0.0) for _ in range(JOBS)]
    row = Limit.objects.using(ALIAS).filter(scope=HOLD)
    seen: Counter[int] = Counter()  # start instant -> starts then (one claim, one instant)

    def read_starts() -> None:
        for kept in row.values_list("starts", flat=True):
            seen.update(Counter(kept) - seen)

    def drained() -> bool:
        read_starts()
        return succeeded(ids) == JOBS

    wait_until(drained, 120, f"{JOBS} jobs to succeed")
    read_starts()

    assert seen.total() == JOBS, f"{seen.total()} starts seen for {JOBS} jobs"
    second = timedelta(seconds=1) // timedelta(microseconds=1)
    for end in seen:
        window = sum(n for at, n in seen.items() if end - second < at <= end)
        at = _EPOCH + timedelta(microseconds=end)
        assert window <= 20, f"{window} starts in the second up to {at}"
    assert len(ledger.entries("start")) == JOBS
    assert time.monotonic() - began >= (JOBS - 20) / 20, "the rate was not applied"
