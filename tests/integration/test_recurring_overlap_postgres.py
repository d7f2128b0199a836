"""The recurring overlap policy across real processes on PostgreSQL: 3 ``millrace_worker``
processes, each with its scheduler, fire one definition whose job runs 0.4 s, while the
test makes an occurrence due every 50 ms. With ``skip`` or ``queue`` no two of its runs
ever overlap (read from the execution ledger, outside the database), and yet it ran more
than once; ``skip`` recorded the occurrences it dropped.

The cron itself fires once a year: the test makes each occurrence due by setting the
definition's next fire time to an instant just past, as a scheduler's own clock would.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest

from millrace_django.contract import OverlapPolicy
from millrace_django.engine import JobClient
from millrace_django.models import Job, Recurring
from tests.conformance.django_harness import require_alias
from tests.integration import ledger_jobs
from tests.integration.processes import Ledger, Processes, wait_until
from tests.integration.test_limits_postgres import most_overlapping
from tests.integration.test_worker_processes import client, ledger, processes

ALIAS = "postgres"
require_alias(ALIAS, "MILLRACE_TEST_POSTGRES_URL")
pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True, databases=[ALIAS])]

__all__ = ["client", "ledger", "processes"]  # the fixtures, shared

RUN_SECONDS = 0.4
PRESSING = 3.0
"""Seconds during which an occurrence is made due every 50 ms."""
STARTED = "started: queues"


@pytest.mark.parametrize("overlap", [OverlapPolicy.SKIP, OverlapPolicy.QUEUE])
def test_schedulers_in_three_processes_never_run_two_occurrences_at_once(
    client: JobClient, processes: Processes, ledger: Ledger, overlap: OverlapPolicy
) -> None:
    client.upsert_recurring(
        "sync", ledger_jobs.hold, cron="0 0 1 1 *", args=[RUN_SECONDS], overlap=overlap
    )
    workers = [processes.start("millrace_worker", "--concurrency=4") for _ in range(3)]
    for worker in workers:
        worker.wait_for_log(STARTED)
    definition = Recurring.objects.using(ALIAS).filter(id="sync")

    pressed_until = time.monotonic() + PRESSING
    while time.monotonic() < pressed_until:
        due = datetime.now(UTC) - timedelta(milliseconds=1)
        definition.filter(next_fire_time__gt=due).update(next_fire_time=due)
        time.sleep(0.05)
    fired = Job.objects.using(ALIAS).filter(recurring_id="sync")
    wait_until(
        lambda: len(ledger.entries("done")) == fired.count(), 30, "every fired run to finish"
    )

    runs = ledger.entries("start")
    assert sorted(entry.job_id for entry in runs) == sorted(fired.values_list("uuid", flat=True))
    assert len(runs) >= 3, f"only {len(runs)} runs: the occurrences were not pressed"
    assert most_overlapping(ledger) == 1
    stored = definition.get()
    if overlap is OverlapPolicy.SKIP:
        assert stored.last_skip_time is not None
    else:
        assert stored.last_skip_time is None
