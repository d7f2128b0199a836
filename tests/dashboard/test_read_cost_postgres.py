"""No dashboard read pays for history, on PostgreSQL: every page, API endpoint and the
metrics endpoint reads as many rows with thousands of finished jobs stored as with a few.

Rows read are PostgreSQL's own count of what each statement's plan read (see plans.py),
never a timing. The finished jobs go through the storage as a worker's would (enqueued,
claimed, acknowledged), so the maintained counts are kept the way they are in production.

Configured by MILLRACE_TEST_POSTGRES_URL; skipped when unset, except in CI, where it fails.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from datetime import timedelta
from uuid import uuid4

import pytest
from django.db import connections
from django.test import Client

from millrace_django.conformance.support import make_instance
from millrace_django.contract import (
    ClaimRequest,
    InstanceState,
    JobRecord,
    JobState,
    JobTransition,
)
from millrace_django.engine.invocation import Invocation
from millrace_django.testing import JobRunner
from tests.conformance.django_harness import server_marks
from tests.dashboard.plans import StatementCost, statement_costs
from tests.dashboard.sample import World

pytestmark = server_marks("postgres", "MILLRACE_TEST_POSTGRES_URL", with_default=True)

BASE = "/admin/millrace/"
API = f"{BASE}api/v1/"
BATCH = 500
QUEUES = ("bulk-a", "bulk-b", "emails")
SLACK = 51
"""Rows a statement may read beyond what it read before: one page. Where a filter keeps
a third of a state's jobs, the planner walks that state newest first and reads about
three rows per row shown, a little more or less as the mix shifts; reads that paid for
history would grow with the 15 times more finished jobs instead."""

PATHS = [
    "",
    "?tenant=acme",
    "jobs/",
    "jobs/?state=succeeded",
    "jobs/?state=dead",
    "jobs/?queue=reports",
    "jobs/?tenant=acme",
    "jobs/?untenanted=on&state=succeeded",
    "jobs/?target=tests.dashboard.sample:import",
    "jobs/?target=tests.dashboard.sample:send_welcome&state=succeeded",
    "jobs/?queue=emails&state=succeeded&state=dead&state=cancelled",
    "queues/",
    "catalog/",
    "catalog/?tenant=acme",
    "catalog/tests.dashboard.sample:send_welcome/",
    "recurring/",
    "instances/",
    "instances/?state=completed",
    "instances/?tenant=acme",
    "metrics",
    f"{API}statistics",
    f"{API}statistics?tenant=acme",
    f"{API}jobs",
    f"{API}jobs?queue=reports",
    f"{API}jobs?state=succeeded&target=tests.dashboard.sample:send",
    f"{API}queues",
    f"{API}catalog",
    f"{API}catalog/tests.dashboard.sample:send_welcome",
    f"{API}recurring",
    f"{API}instances",
]


@pytest.fixture
def runner(postgres_runner: JobRunner) -> JobRunner:
    """The world (conftest.py) is seeded on PostgreSQL."""
    return postgres_runner


def run_to_success(runner: JobRunner, queues: tuple[str, ...], count: int) -> int:
    """Claim up to ``count`` jobs of ``queues`` and acknowledge them all as succeeded, as
    a worker would; how many succeeded."""
    storage, clock = runner.storage, runner.clock
    claimed = storage.claim(
        ClaimRequest(
            worker_id="bulk", queues=frozenset(queues), max_count=count, lease=timedelta(1)
        )
    )
    done = storage.apply_many(
        [
            JobTransition(
                job_id=job.id,
                expected_worker_id="bulk",
                expected_attempt=job.attempt,
                target=JobState.SUCCEEDED,
                failures=0,
                finished_at=clock.now(),
            )
            for job in claimed
        ]
    )
    assert done == [True] * len(claimed)
    return len(claimed)


def finish_jobs(runner: JobRunner, count: int) -> None:
    """Store ``count`` jobs that ran and succeeded, in batches, as workers would: in three
    queues, every tenth of tenant ``acme``; and a completed workflow instance per five
    jobs, every other one of ``acme``."""
    storage, clock = runner.storage, runner.clock
    for start in range(0, count, BATCH):
        size = min(BATCH, count - start)
        jobs = [
            JobRecord(
                id=uuid4(),
                queue=QUEUES[n % len(QUEUES)],
                invocation=Invocation(target="tests.dashboard.sample:send_welcome"),
                state=JobState.ENQUEUED,
                created_at=clock.now(),
                tenant_id="acme" if n % 10 == 0 else None,
            )
            for n in range(size)
        ]
        storage.enqueue(jobs)
        assert run_to_success(runner, QUEUES, size) == size
        for n in range(size // 5):
            instance = make_instance(clock, tenant_id="acme" if n % 2 == 0 else None)
            storage.create_instance(instance)
            storage.update_instance(replace(instance, state=InstanceState.COMPLETED), 1)
        clock.advance(timedelta(seconds=1))


def costs(client: Client, paths: list[str] = PATHS) -> dict[str, list[StatementCost]]:
    with connections["postgres"].cursor() as cursor:
        cursor.execute("ANALYZE")
    measured = {}
    for path in paths:

        def get(path: str = path) -> None:
            response = client.get(BASE + path if not path.startswith(API) else path)
            assert response.status_code == 200, (path, response.status_code)

        measured[path] = statement_costs("postgres", get)
    return measured


def as_history_grows[T](runner: JobRunner, measure: Callable[[], T]) -> tuple[T, T]:
    """``measure()`` with 300 finished jobs stored, then with 4,800 (counts folded)."""
    finish_jobs(runner, 300)
    runner.storage.fold_statistics(1000)
    few = measure()
    finish_jobs(runner, 4500)
    runner.storage.fold_statistics(10_000)
    return few, measure()


def test_no_page_reads_more_rows_when_finished_jobs_pile_up(
    operator: Client, world: World, runner: JobRunner
):
    few, many = as_history_grows(runner, lambda: costs(operator))

    grown = {
        path: [
            (after.rows_read, before.rows_read, after.widest_node, after.sql[:300])
            for before, after in zip(few[path], many[path], strict=True)
            if after.rows_read > before.rows_read + SLACK
        ]
        for path in PATHS
    }
    assert {path: rows for path, rows in grown.items() if rows} == {}
    assert all(few[path] for path in PATHS), "every path ran at least one SELECT"


def test_counts_of_unfinished_jobs_and_instances_read_index_entries_alone(
    operator: Client, world: World
):
    """The counts per unfinished state are index-only scans: no visit to a row's heap
    page per job counted, which is what a backlog of tens of thousands costs. (Plain
    and bitmap scans are switched off, so the small table cannot hide the plan.)"""
    connection = connections["postgres"]
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE")  # index-only scans read the visibility map
        cursor.execute("SET enable_seqscan = off; SET enable_bitmapscan = off")
    try:
        measured = statement_costs("postgres", lambda: operator.get(f"{API}statistics"))
    finally:
        with connection.cursor() as cursor:
            cursor.execute("RESET enable_seqscan; RESET enable_bitmapscan")
    counts = [cost for cost in measured if "UNION ALL" in cost.sql and "COUNT(" in cost.sql]
    assert [cost.sql.split(" FROM ")[1].split()[0] for cost in counts] == [
        '"millrace_job"',
        '"millrace_workflow_instance"',
    ]
    assert [cost.widest_node.split(" millrace_")[0] for cost in counts] == ["Index Only Scan"] * 2
