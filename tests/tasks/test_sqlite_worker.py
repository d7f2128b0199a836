"""MillraceBackend on the ORM storage (the SQLite test database), run by the runtime's
real :class:`~millrace_django.runtime.Worker` on its threads, and enqueues that share
the caller's transaction.

The app's own wiring is used: ``task.enqueue`` goes through the default client
installed at start-up, and the worker runs on the same configured storage.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.db import transaction
from django.tasks import TaskResultStatus, default_task_backend
from django.tasks.exceptions import TaskResultDoesNotExist
from django.test import override_settings
from django.utils import timezone

from millrace_django import assembly
from millrace_django.conf import get_settings
from millrace_django.engine import JobTimedOut
from millrace_django.management.support import connection_hooks
from millrace_django.runtime import Scheduler, Worker
from tests.tasks import tasks_under_test as t
from tests.tasks.conftest import Signals

pytestmark = pytest.mark.django_db(transaction=True)

FAST = {
    "QUEUES": ["default", "emails", "reports"],
    "POLL_MIN": 0.01,
    "POLL_MAX": 0.05,
    "SHUTDOWN_TIMEOUT": 10,
}


@pytest.fixture(autouse=True)
def fast_workers() -> Iterator[None]:
    with override_settings(MILLRACE=FAST):
        yield


def frames(text: str) -> list[str]:
    """The functions of a traceback's frames, outermost first."""
    return re.findall(r'^  File "[^"]+", line \d+, in (\S+)$', text, re.M)


def run_worker(*, concurrency: int = 4) -> Worker:
    """Activate what is due, then run a worker until nothing is claimable."""
    storage, clock, settings = assembly.storage(), assembly.clock(), get_settings()
    Scheduler(storage, clock, settings, hooks=connection_hooks()).run_once()
    worker = Worker(storage, clock, settings, concurrency=concurrency, hooks=connection_hooks())
    worker.run(until_idle=True)
    return worker


def test_a_worker_runs_tasks_and_results_come_back(signals: Signals) -> None:
    added = t.add.enqueue(20, 22)
    shouted = t.shout.enqueue("ok", times=3)
    seen = t.introspect.enqueue()
    doubled = t.async_double.enqueue(8)
    failed = t.always_fails.using(max_attempts=1).enqueue("kaput")

    worker = run_worker()

    for result in (added, shouted, seen, doubled, failed):
        result.refresh()
        assert result.worker_ids == [worker.worker_id]
        assert result.started_at is not None and result.finished_at is not None
        assert result.enqueued_at is not None and result.enqueued_at <= result.started_at
    assert added.return_value == 42
    assert shouted.return_value == {"text": "OKOKOK", "parts": ["ok", 3]}
    assert seen.return_value["id"] == seen.id
    assert seen.return_value["worker_ids"] == [worker.worker_id]
    assert doubled.return_value["double"] == 16
    assert failed.status == TaskResultStatus.FAILED
    assert [e.exception_class for e in failed.errors] == [ValueError]
    assert "kaput" in failed.errors[0].traceback

    assert signals.of(added.id) == [
        ("enqueued", "READY"),
        ("started", "RUNNING"),
        ("finished", "SUCCESSFUL"),
    ]
    assert signals.of(failed.id)[-1] == ("finished", "FAILED")
    worker_signals = [s for s in signals.sent if s.signal != "enqueued"]
    assert all(s.thread.startswith("millrace-job") for s in worker_signals)


def test_a_result_read_back_from_the_database_equals_the_enqueued_one() -> None:
    later = timezone.now() + timedelta(hours=1)
    for declared in (t.once, t.flaky.using(max_attempts=2, run_after=later, priority=-3)):
        result = declared.enqueue(1)
        assert default_task_backend.get_result(result.id) == result
        assert declared.get_result(result.id).task == declared


def test_retries_are_read_back_between_and_after_attempts() -> None:
    result = t.flaky.enqueue(2)
    run_worker()
    result.refresh()
    assert result.status == TaskResultStatus.READY  # the retry waits 100 ms
    assert (result.attempts, len(result.errors)) == (1, 1)

    time.sleep(0.2)  # past the retry's due time
    run_worker()
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value["attempt"] == 2
    assert result.attempts == 2
    assert [e.exception_class for e in result.errors] == [t.FlakyError]


def test_a_failed_tasks_traceback_starts_at_the_task_and_is_the_one_sent(
    signals: Signals,
) -> None:
    failed = [t.always_fails.using(max_attempts=1).enqueue("kaboom"), t.async_fails.enqueue("x")]
    run_worker()
    for result, function, line in zip(
        failed,
        ("always_fails", "async_fails"),
        ("ValueError: kaboom", "ValueError: x"),
        strict=True,
    ):
        result.refresh()
        (error,) = result.errors
        assert error.traceback.startswith("Traceback (most recent call last):\n")
        assert frames(error.traceback)[0] == function
        assert error.traceback.endswith(f"\n{line}\n")
        (sent,) = [s for s in signals.sent if s.id == result.id and s.signal == "finished"]
        assert sent.tracebacks == (error.traceback,)


def test_a_failure_in_the_runner_is_stored_as_it_was_sent(signals: Signals) -> None:
    result = t.returns_a_set.using(max_attempts=1).enqueue()
    run_worker()
    result.refresh()
    (error,) = result.errors
    assert "millrace_django" not in error.traceback
    assert error.traceback.endswith("\nTypeError: Unsupported type: <class 'set'>\n")
    (sent,) = [s for s in signals.sent if s.id == result.id and s.signal == "finished"]
    assert sent.tracebacks == (error.traceback,)


def test_a_task_running_past_its_timeout_fails_with_job_timed_out(signals: Signals) -> None:
    result = t.sleepy.enqueue(0.6)  # the worker looks at deadlines every 250 ms
    run_worker()
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    (error,) = result.errors
    assert error.exception_class is JobTimedOut
    assert error.traceback == "Timed out after 0.2 seconds."
    assert signals.of(result.id)[-1] == ("finished", "FAILED")


def test_an_enqueue_commits_with_the_callers_transaction(signals: Signals) -> None:
    with transaction.atomic():
        result = t.add.enqueue(1, 2)
        assert signals.sent == []  # not before the commit
        assert t.add.get_result(result.id).status == TaskResultStatus.READY
    assert signals.of(result.id) == [("enqueued", "READY")]
    run_worker()
    assert t.add.get_result(result.id).return_value == 3


def test_an_enqueue_rolls_back_with_the_callers_transaction(signals: Signals) -> None:
    with pytest.raises(RuntimeError), transaction.atomic():
        result = t.add.enqueue(1, 2)
        raise RuntimeError("the view failed")
    with pytest.raises(TaskResultDoesNotExist):
        t.add.get_result(result.id)
    assert signals.sent == []
    assert run_worker().stats.claimed == 0


def test_priority_order_with_one_worker_thread() -> None:
    t.RUN_ORDER.clear()
    labels: dict[str, Any] = {"low": -10, "high": 90, "middle": 0}
    for label, priority in labels.items():
        t.stamp.using(priority=priority).enqueue(label)
    run_worker(concurrency=1)
    assert t.RUN_ORDER == ["high", "middle", "low"]
