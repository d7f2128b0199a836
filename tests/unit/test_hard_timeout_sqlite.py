"""A hard-timeout job's child process opens its own connection to the worker's database:
the test database here, which pytest-django names at run time (on SQLite, a file)."""

from __future__ import annotations

import os
from datetime import timedelta

import pytest
from django.db import connection

from millrace_django import job
from millrace_django.clock import SystemClock
from millrace_django.contract import ClaimRequest, JobState
from millrace_django.engine import JobClient, JobContext, default_client
from millrace_django.runtime import run_claimed

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
    client = default_client()  # the project's: the ORM storage on the test database
    assert isinstance(client, JobClient)
    job_id = order_receipt.enqueue("o-7")
    request = ClaimRequest(
        worker_id="w", queues=frozenset({"default"}), max_count=1, lease=timedelta(minutes=1)
    )
    (claimed,) = client.storage.claim(request)
    assert claimed.id == job_id and claimed.hard_timeout == timedelta(seconds=60)
    clock = SystemClock()
    outcome = run_claimed(
        claimed, JobContext.for_job(claimed, clock), clock=clock, config=client.config
    )

    assert outcome.transition is not None
    assert outcome.transition.target is JobState.SUCCEEDED, outcome.transition.error
    assert outcome.transition.result not in (None, os.getpid())  # it ran in another process
    (receipt,) = client.storage.claim(request)  # the child's enqueue, in this database
    assert receipt.invocation.target == send_receipt.target
    assert receipt.invocation.args == ["o-7"]
