"""A hard-timeout job's child process opens its own connection to the worker's database:
the test database here, which pytest-django names at run time (on SQLite, a file)."""

from __future__ import annotations

import os

import pytest
from django.db import connection

from millrace_django import job
from millrace_django.contract import JobState
from millrace_django.testing import project_runner

pytestmark = pytest.mark.django_db(transaction=True)  # the child must see committed rows


@job(hard_timeout=60)
def order_receipt(order: str) -> int:
    """Runs in a child process; its enqueue writes through the child's own connection."""
    send_receipt.enqueue(order)
    return os.getpid()


@job
def send_receipt(order: str) -> str:
    return f"receipt for {order}"


def test_a_job_in_its_child_process_writes_to_the_workers_database() -> None:
    assert connection.vendor == "sqlite"
    with project_runner(storage="orm") as runner:
        job_id = order_receipt.enqueue("o-7")
        assert runner.run_until_idle() == 2  # the receipt the child enqueued ran too
        assert runner.assert_succeeded(job_id).result != os.getpid()
        results = [job.result for job in runner.jobs(JobState.SUCCEEDED) if job.id != job_id]
        assert results == ["receipt for o-7"]
