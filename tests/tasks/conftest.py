"""Fixtures of the ``django.tasks`` backend tests: ``TASKS`` naming MillraceBackend for
every test, a recorder of the task signals, and a memory-storage job runner."""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from django.tasks import TaskResult
from django.tasks.signals import task_enqueued, task_finished, task_started
from django.test import override_settings

from millrace_django.testing import JobRunner, project_runner
from tests.tasks.settings_values import TASKS


@pytest.fixture(autouse=True)
def millrace_tasks() -> Iterator[None]:
    with override_settings(TASKS=TASKS):
        yield


@pytest.fixture
def runner() -> Iterator[JobRunner]:
    """Runs the tasks on this thread over memory storage, in fake time."""
    with project_runner() as installed:
        yield installed


@dataclass(frozen=True, slots=True)
class Sent:
    """One task signal as its receiver saw it."""

    signal: str
    sender: type
    id: str
    status: str
    attempts: int
    errors: int
    tracebacks: tuple[str, ...]
    handling: type[BaseException] | None
    """The exception being handled when the signal was sent, if any."""
    thread: str


class Signals:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sent: list[Sent] = []

    def record(self, signal: str, sender: type, task_result: TaskResult[Any, Any]) -> None:
        entry = Sent(
            signal=signal,
            sender=sender,
            id=task_result.id,
            status=str(task_result.status),
            attempts=task_result.attempts,
            errors=len(task_result.errors),
            tracebacks=tuple(error.traceback for error in task_result.errors),
            handling=sys.exc_info()[0],
            thread=threading.current_thread().name,
        )
        with self._lock:
            self._sent.append(entry)

    def of(self, result_id: str) -> list[tuple[str, str]]:
        """``(signal, status)`` pairs sent for one task, in order."""
        with self._lock:
            return [(s.signal, s.status) for s in self._sent if s.id == result_id]

    @property
    def sent(self) -> list[Sent]:
        with self._lock:
            return list(self._sent)


@pytest.fixture
def signals() -> Iterator[Signals]:
    recorder = Signals()
    receivers = {
        task_enqueued: lambda sender, task_result, **kw: recorder.record(
            "enqueued", sender, task_result
        ),
        task_started: lambda sender, task_result, **kw: recorder.record(
            "started", sender, task_result
        ),
        task_finished: lambda sender, task_result, **kw: recorder.record(
            "finished", sender, task_result
        ),
    }
    for signal, receiver in receivers.items():
        signal.connect(receiver, weak=False, dispatch_uid=("millrace-test", id(recorder), signal))
    try:
        yield recorder
    finally:
        for signal in receivers:
            signal.disconnect(dispatch_uid=("millrace-test", id(recorder), signal))
