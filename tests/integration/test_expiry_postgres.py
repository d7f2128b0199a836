"""Expiry across real worker processes on PostgreSQL: 2 ``millrace_worker`` processes of 2
threads each (and their schedulers) get more jobs than they can start before the jobs'
deadline. Every job either ran, having started before its deadline, or ended ``cancelled``
with the expiry reason without running; none both, none left waiting.

Starts are read from the execution ledger (outside the database): a job writes ``start``
as its handler begins. The worker decides just before that line (the claim, and again as
a thread takes the job up), so a start may be written a little after the deadline it
beat: ``DISPATCH`` bounds that delay on a loaded machine.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from millrace_django.contract import JobState, expired_reason
from millrace_django.engine import JobClient
from millrace_django.models import JOB_STATE_CODES, JOB_STATES, Job
from tests.conformance.django_harness import require_alias
from tests.integration import ledger_jobs
from tests.integration.processes import Ledger, Processes, wait_until
from tests.integration.test_worker_processes import client, ledger, processes

ALIAS = "postgres"
require_alias(ALIAS, "MILLRACE_TEST_POSTGRES_URL")
pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True, databases=[ALIAS])]

__all__ = ["client", "ledger", "processes"]  # the fixtures, shared

JOBS = 120
DEADLINE = timedelta(seconds=1.5)
DISPATCH = 0.25
"""Seconds a ledger ``start`` may trail the worker's last check of the deadline."""
STARTED = "started: queues"


def test_worker_processes_start_no_job_after_its_deadline_and_end_the_rest_expired(
    client: JobClient, processes: Processes, ledger: Ledger
) -> None:
    workers = [processes.start("millrace_worker", "--concurrency=2") for _ in range(2)]
    for worker in workers:
        worker.wait_for_log(STARTED)
    ids = [client.enqueue(ledger_jobs.hold, 0.1, expires=DEADLINE) for _ in range(JOBS)]
    ended = [JOB_STATE_CODES[JobState.SUCCEEDED], JOB_STATE_CODES[JobState.CANCELLED]]
    jobs = Job.objects.using(ALIAS).filter(uuid__in=ids)

    wait_until(lambda: jobs.filter(state__in=ended).count() == JOBS, 60, "every job to end")

    starts = {entry.job_id: entry.at for entry in ledger.entries("start")}
    assert len(ledger.entries("start")) == len(starts), "a job started twice"
    for job_id, state, expires_at, last_error in jobs.values_list(
        "uuid", "state", "expires_at", "last_error"
    ):
        assert expires_at is not None
        if job_id in starts:
            assert JOB_STATES[state] is JobState.SUCCEEDED
            late = starts[job_id] - expires_at.timestamp()
            assert late < DISPATCH, f"job {job_id} started {late:.3f} s after its deadline"
        else:
            assert JOB_STATES[state] is JobState.CANCELLED
            assert last_error == expired_reason(expires_at)
    assert 0 < len(starts) < JOBS, f"{len(starts)} of {JOBS} ran: the test proves nothing"
