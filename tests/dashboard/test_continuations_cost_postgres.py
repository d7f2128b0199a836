"""A job page lists the newest continuations of a job without reading the others, on
PostgreSQL: its statements read as many rows for a job with thousands of continuations
as for one with a few (through ``millrace_job_parent``).

Rows read are PostgreSQL's own count of what each statement's plan read (see plans.py),
never a timing. Configured by MILLRACE_TEST_POSTGRES_URL; skipped when unset, except in
CI, where it fails.
"""

from __future__ import annotations

from datetime import timedelta
from uuid import UUID, uuid4

import pytest
from django.db import connections
from django.test import Client
from django.urls import reverse

from millrace_django.contract import CONTINUATION_CAP, JobRecord, JobState
from millrace_django.engine.invocation import Invocation
from millrace_django.testing import JobRunner
from tests.conformance.django_harness import require_alias
from tests.dashboard.plans import statement_costs
from tests.dashboard.sample import build_report

require_alias("postgres", "MILLRACE_TEST_POSTGRES_URL")
pytestmark = [
    pytest.mark.postgres,
    pytest.mark.django_db(transaction=True, databases=["default", "postgres"]),
]

SLACK = 2 * CONTINUATION_CAP
"""Rows a page may read beyond what it read for a job with a few continuations: the
newest ones it lists, and the ties on their creation instant it sorts."""


def continue_with(runner: JobRunner, parent: UUID, count: int) -> None:
    """``count`` continuations of ``parent``, one second apart, inserted in batches."""
    for start in range(0, count, 500):
        children = []
        for _ in range(min(500, count - start)):
            runner.advance(timedelta(seconds=1))
            children.append(
                JobRecord(
                    id=uuid4(),
                    queue="emails",
                    invocation=Invocation(target="tests.dashboard.sample:send_welcome"),
                    state=JobState.AWAITING,
                    created_at=runner.clock.now(),
                    parent_id=parent,
                )
            )
        runner.storage.enqueue(children)


def rows_read(client: Client, job_id: UUID) -> int:
    with connections["postgres"].cursor() as cursor:
        cursor.execute("ANALYZE")
    path = reverse("millrace_dashboard:job", args=[job_id])

    def get() -> None:
        response = client.get(path)
        assert response.status_code == 200, response.status_code

    return sum(cost.rows_read for cost in statement_costs("postgres", get))


def test_a_job_page_reads_only_the_continuations_it_lists(
    operator: Client, postgres_runner: JobRunner
):
    runner = postgres_runner
    few = runner.client.schedule(build_report, "2026-01", delay=timedelta(days=1))
    many = runner.client.schedule(build_report, "2026-02", delay=timedelta(days=1))
    continue_with(runner, few, 5)
    continue_with(runner, many, 3000)
    page = operator.get(reverse("millrace_dashboard:job", args=[many])).content.decode()
    assert page.count('<li data-job="') == CONTINUATION_CAP
    assert rows_read(operator, many) <= rows_read(operator, few) + SLACK
