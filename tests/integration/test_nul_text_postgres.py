"""Text a job produces itself, its error and its log lines, may hold NUL characters
(binary input echoed in a message); PostgreSQL refuses them in any text column, so they
are stored escaped (``\\x00``) instead of failing the job's transition.

Configured by MILLRACE_TEST_POSTGRES_URL; skipped when unset, except in CI, where it fails.
"""

from __future__ import annotations

from datetime import UTC, datetime

from millrace_django import JobContext, Retry, job
from millrace_django.clock import FakeClock
from millrace_django.contract import JobState
from millrace_django.storage.orm import DjangoStorage
from millrace_django.testing import JobRunner
from tests.conformance.django_harness import server_marks

pytestmark = server_marks("postgres", "MILLRACE_TEST_POSTGRES_URL")


@job(retry=Retry.none())
def echo_binary(line: str, context: JobContext) -> None:
    context.log(f"read {line}\x00tail")
    raise ValueError(f"not a CSV line: {line}\x00")


def test_a_nul_in_a_jobs_error_or_log_line_is_stored_escaped() -> None:
    clock = FakeClock(datetime(2026, 12, 5, tzinfo=UTC))
    storage = DjangoStorage("postgres", clock)
    runner = JobRunner(storage, clock)
    job_id = runner.client.enqueue(echo_binary, "a,b")

    runner.run_until_idle(throw_on_failure=False)

    details = storage.get_job_details(job_id)
    assert details is not None and details.summary.state is JobState.DEAD
    assert details.last_error is not None
    assert details.last_error.endswith("ValueError: not a CSV line: a,b\\x00\n")
    assert [line.message for line in details.logs] == ["read a,b\\x00tail"]
