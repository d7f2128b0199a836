"""A tag filter reads the tag's jobs alone, and a tag's catalog its functions' figures, on
PostgreSQL: no scan per state, and as many rows with thousands of finished untagged jobs
stored as with a few.

Rows read are PostgreSQL's own count of what each statement's plan read (plans.py).
Configured by MILLRACE_TEST_POSTGRES_URL; skipped when unset, except in CI, where it fails.
"""

from __future__ import annotations

from datetime import timedelta
from uuid import uuid4

import pytest
from django.test import Client

from millrace_django.contract import JobRecord, JobState
from millrace_django.engine.invocation import Invocation
from millrace_django.testing import JobRunner
from tests.conformance.django_harness import server_marks
from tests.dashboard.test_read_cost_postgres import (
    API,
    SLACK,
    as_history_grows,
    costs,
    run_to_success,
)

pytestmark = server_marks("postgres", "MILLRACE_TEST_POSTGRES_URL", with_default=True)

TAGGED = 40
"""Jobs carrying the tag: half finished, half waiting."""
PATHS = [
    "jobs/?tag=invoices",
    "jobs/?tag=invoices&state=succeeded",
    "jobs/?tag=invoices&state=enqueued&state=succeeded",
    f"{API}jobs?tag=invoices",
    f"{API}jobs?tag=invoices&state=succeeded&limit=5",
]
CATALOG_PATHS = ["catalog/?tag=invoices", f"{API}catalog?tag=invoices"]
"""The tag's catalog shows its function's figures, all its jobs included: the finished
jobs the test adds are that function's too, and its run-time rows (one per minute and
bucket of the last hour, whatever the number of jobs) may grow by up to a page
(``SLACK``) as those jobs finish in more minutes; never with the jobs themselves."""


@pytest.fixture
def runner(postgres_runner: JobRunner) -> JobRunner:
    return postgres_runner


def tagged_jobs(runner: JobRunner) -> None:
    """:data:`TAGGED` jobs tagged ``invoices`` (and another tag), half of them run to
    success as a worker would."""
    storage, clock = runner.storage, runner.clock
    jobs = [
        JobRecord(
            id=uuid4(),
            queue="bulk-a",
            invocation=Invocation(target="tests.dashboard.sample:send_welcome"),
            state=JobState.ENQUEUED,
            created_at=clock.now(),
            tags=("invoices", "eu"),
        )
        for _ in range(TAGGED)
    ]
    storage.enqueue(jobs)
    assert run_to_success(runner, ("bulk-a",), TAGGED // 2) == TAGGED // 2
    clock.advance(timedelta(seconds=1))


def tag_costs(client: Client) -> dict[str, list[int]]:
    measured = costs(client, PATHS + CATALOG_PATHS)
    return {path: [cost.rows_read for cost in measured[path]] for path in measured}


def test_a_tag_filter_reads_no_more_rows_when_finished_untagged_jobs_pile_up(
    operator: Client, runner: JobRunner
):
    tagged_jobs(runner)
    few, many = as_history_grows(runner, lambda: tag_costs(operator))

    grown = {
        path: (few[path], rows)
        for path, rows in many.items()
        if any(
            after > before + (SLACK if path in CATALOG_PATHS else 0)
            for before, after in zip(few[path], rows, strict=True)
        )
    }
    assert grown == {}
    for path, rows in many.items():
        # The tag's index entries and its jobs, never a state's whole index. (On the
        # small table the planner may read all of it at once: cheaper there.)
        assert max(rows) <= 3 * TAGGED + 1, (path, rows)


def test_a_tags_catalog_on_postgresql_lists_its_function_with_every_job_of_it(
    operator: Client, runner: JobRunner
):
    tagged_jobs(runner)

    catalog = operator.get(f"{API}catalog", {"tag": "eu"}).json()

    assert [item["target"] for item in catalog["items"]] == ["tests.dashboard.sample:send_welcome"]
    assert catalog["items"][0]["tags"] == ["eu", "invoices"]
    assert catalog["total"]["jobsByState"]["succeeded"] == TAGGED // 2
    assert catalog["total"]["jobsByState"]["enqueued"] == TAGGED // 2
