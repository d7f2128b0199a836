"""A ``@task`` raising ``KeyboardInterrupt`` (or another exception outside
``Exception``) fails like any task, as Django's own task tests expect: the result says
FAILED with the exception's class, ``task_finished`` is sent, and the worker keeps its
thread and stops by itself when idle."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from django.tasks import TaskResultStatus, task
from django.test import override_settings

from millrace_django import assembly
from millrace_django.conf import get_settings
from millrace_django.management.support import connection_hooks
from millrace_django.runtime import Worker
from tests.tasks.conftest import Signals
from tests.tasks.settings_values import TASKS

pytestmark = pytest.mark.django_db(transaction=True)

RETURN_SECONDS = 30.0

with override_settings(TASKS=TASKS):

    @task(max_attempts=1)
    def interrupted(kind: str) -> None:
        raise {"KeyboardInterrupt": KeyboardInterrupt, "SystemExit": SystemExit}[kind](kind)


@pytest.fixture(autouse=True)
def fast_workers() -> Iterator[None]:
    with override_settings(MILLRACE={"POLL_MIN": 0.01, "POLL_MAX": 0.05}):
        yield


def run_worker_bounded() -> Worker:
    """A worker until nothing is claimable, on a thread; fails unless it stops in time."""
    worker = Worker(
        assembly.storage(),
        assembly.clock(),
        get_settings(),
        concurrency=1,
        hooks=connection_hooks(),
    )
    running = threading.Thread(target=worker.run, kwargs={"until_idle": True}, daemon=True)
    running.start()
    running.join(RETURN_SECONDS)
    assert not running.is_alive(), f"the worker still runs after {RETURN_SECONDS:g} s"
    return worker


@pytest.mark.parametrize("kind", ["KeyboardInterrupt", "SystemExit"])
def test_a_task_raising_a_base_exception_fails_and_the_worker_stops_when_idle(
    kind: str, signals: Signals
) -> None:
    result = interrupted.enqueue(kind)
    run_worker_bounded()

    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert [error.exception_class_path for error in result.errors] == [f"builtins.{kind}"]
    assert signals.of(result.id) == [
        ("enqueued", "READY"),
        ("started", "RUNNING"),
        ("finished", "FAILED"),
    ]
