"""MillraceBackend on PostgreSQL with a real ``manage.py millrace_worker`` process.

The test enqueues through ``task.enqueue`` into this run's PostgreSQL test database;
the worker process (settings: ``tests.tasks.worker_settings``) runs the tasks, and
the test reads them back with ``result.refresh()`` and ``Task.get_result``. The worker
appends each ``task_started``/``task_finished`` it sends to a file, so the signals
sent in the other process are checked too. Every wait polls with a deadline.

Configured by MILLRACE_TEST_POSTGRES_URL (``scripts/testdb.sh`` starts a throwaway server);
skipped when unset, except in CI, where it fails.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import suppress
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from django.db import connections
from django.tasks import TaskResult, TaskResultStatus
from django.test import override_settings
from django.utils import timezone

from tests.conformance.django_harness import require_alias
from tests.tasks import tasks_under_test as t
from tests.tasks.conftest import Signals
from tests.tasks.settings_values import FAST_MILLRACE

ALIAS = "postgres"
require_alias(ALIAS, "MILLRACE_TEST_POSTGRES_URL")
pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True, databases=[ALIAS])]

REPO = Path(__file__).resolve().parents[2]
DEADLINE_SECONDS = 60.0


def wait_until(condition: Callable[[], Any], what: str, timeout: float = DEADLINE_SECONDS) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what} did not happen within {timeout:g}s")
        time.sleep(0.05)
    return value


class WorkerProcess:
    """``manage.py millrace_worker`` on this run's test database, in a session of its own."""

    def __init__(self, tmp_path: Path, *args: str) -> None:
        self.log_path = tmp_path / "worker.log"
        self.signal_log = tmp_path / "signals.jsonl"
        self.signal_log.touch()
        env = {k: v for k, v in os.environ.items() if not k.startswith("MILLRACE_TEST_")}
        env.update(
            DJANGO_SETTINGS_MODULE="tests.tasks.worker_settings",
            MILLRACE_TASKS_DATABASE_URL=_database_url(),
            PYTHONUNBUFFERED="1",
        )
        env[t.SIGNAL_LOG_VARIABLE] = str(self.signal_log)
        with self.log_path.open("wb") as output:
            self.process = subprocess.Popen(
                [sys.executable, "manage.py", "millrace_worker", *args],
                cwd=REPO,
                env=env,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.pid = self.process.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def signals(self, result_id: str) -> list[tuple[str, str, int]]:
        """``(signal, status, pid)`` of what the worker sent for one task, in order."""
        sent = [json.loads(line) for line in self.signal_log.read_text().splitlines()]
        return [(s["signal"], s["status"], s["pid"]) for s in sent if s["id"] == result_id]

    def stop(self) -> int:
        """SIGTERM, then wait for a clean exit (failing with the log)."""
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(30)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"the worker still runs after SIGTERM:\n{self.log()}") from None

    def kill(self) -> None:
        if self.process.poll() is None:
            with suppress(ProcessLookupError):
                os.killpg(self.pid, signal.SIGKILL)
            self.process.wait(10)


def _database_url() -> str:
    """The test database (not the configured one): what the worker must open."""
    s = connections[ALIAS].settings_dict
    credentials = f"{quote(s['USER'], safe='')}:{quote(s['PASSWORD'], safe='')}"
    return f"postgres://{credentials}@{s['HOST']}:{s['PORT']}/{s['NAME']}"


@pytest.fixture(autouse=True)
def storage_on_postgres() -> Iterator[None]:
    """``task.enqueue`` in this process stores in the PostgreSQL test database."""
    with override_settings(MILLRACE={**FAST_MILLRACE, "DATABASE": ALIAS}):
        yield
    connections[ALIAS].close()


@pytest.fixture
def start_worker(tmp_path: Path) -> Iterator[Callable[..., WorkerProcess]]:
    started: list[WorkerProcess] = []

    def start(*args: str) -> WorkerProcess:
        worker = WorkerProcess(tmp_path, *args)
        started.append(worker)
        return worker

    yield start
    for worker in started:  # before the test database is emptied
        worker.kill()


def finished(*results: TaskResult[Any, Any]) -> bool:
    for result in results:
        result.refresh()
    return all(result.is_finished for result in results)


def test_a_worker_process_runs_tasks_and_their_results_come_back(
    start_worker: Callable[..., WorkerProcess], signals: Signals
) -> None:
    added = t.add.enqueue(2, 3)
    failing = t.always_fails.enqueue("boom")
    flaky = t.flaky.enqueue(2)
    seen = t.introspect.enqueue()
    doubled = t.async_double.enqueue(5)
    shouted = t.shout.enqueue("pg", times=2)
    everything = (added, failing, flaky, seen, doubled, shouted)
    assert [signals.of(r.id) for r in everything] == [[("enqueued", "READY")]] * 6

    worker = start_worker("--concurrency=4")
    wait_until(lambda: finished(*everything), "every task's end")
    assert worker.stop() == 0, worker.log()

    marker = f":{worker.pid}:"
    assert added.status == TaskResultStatus.SUCCESSFUL
    assert added.return_value == 5
    assert t.add.get_result(added.id).return_value == 5
    assert len(added.worker_ids) == 1 and marker in added.worker_ids[0]
    assert added.enqueued_at is not None and added.started_at is not None
    assert added.finished_at is not None
    assert added.enqueued_at <= added.started_at <= added.finished_at

    assert failing.status == TaskResultStatus.FAILED
    assert failing.attempts == 3
    assert [e.exception_class for e in failing.errors] == [ValueError] * 3
    assert all("boom" in e.traceback for e in failing.errors)
    with pytest.raises(ValueError, match="Task failed"):
        _ = failing.return_value

    assert flaky.status == TaskResultStatus.SUCCESSFUL
    assert flaky.return_value["attempt"] == 2
    assert [e.exception_class for e in flaky.errors] == [t.FlakyError]
    assert flaky.started_at is not None and flaky.last_attempted_at is not None
    assert flaky.last_attempted_at - flaky.started_at >= timedelta(milliseconds=100)

    assert seen.return_value["id"] == seen.id
    assert seen.return_value["status"] == "RUNNING"
    assert seen.return_value["worker_ids"] == seen.worker_ids
    assert doubled.return_value["double"] == 10
    assert shouted.return_value == {"text": "PGPG", "parts": ["pg", 2]}

    assert worker.signals(added.id) == [
        ("started", "RUNNING", worker.pid),
        ("finished", "SUCCESSFUL", worker.pid),
    ]
    assert [(s, status) for s, status, _ in worker.signals(failing.id)] == [
        ("started", "RUNNING"),
        ("finished", "READY"),
        ("started", "RUNNING"),
        ("finished", "READY"),
        ("started", "RUNNING"),
        ("finished", "FAILED"),
    ]


def test_a_worker_process_honours_priority_and_run_after(
    start_worker: Callable[..., WorkerProcess],
) -> None:
    run_after = timezone.now() + timedelta(seconds=2)
    deferred = t.stamp.using(priority=100, run_after=run_after).enqueue("deferred")
    low = t.stamp.using(priority=-10).enqueue("low")
    middle = t.stamp.enqueue("middle")
    high = t.stamp.using(priority=90).enqueue("high")

    worker = start_worker("--concurrency=1")
    wait_until(lambda: finished(deferred, low, middle, high), "every task's end")
    assert worker.stop() == 0, worker.log()

    def start(result: TaskResult[Any, Any]) -> Any:
        assert result.status == TaskResultStatus.SUCCESSFUL, result.errors
        return result.started_at

    assert start(high) < start(middle) < start(low)
    assert start(deferred) >= run_after
    assert t.stamp.get_result(deferred.id).task.run_after == run_after
