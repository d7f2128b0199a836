"""``@task`` functions for the backend's tests, in-process and in real worker processes.

They are decorated under ``TASKS`` naming :class:`MillraceBackend` (the sample
project's settings may not), so they are :class:`MillraceTask` objects with Millrace's
options. With ``MILLRACE_TASKS_SIGNAL_LOG`` set (the worker processes), every
``task_started`` and ``task_finished`` is appended to that file as one JSON line.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from datetime import timedelta
from typing import Any

from django.tasks import TaskContext, TaskResult, task
from django.tasks.signals import task_finished, task_started
from django.test import override_settings

from millrace_django import Retry
from tests.tasks.settings_values import TASKS

SIGNAL_LOG_VARIABLE = "MILLRACE_TASKS_SIGNAL_LOG"


RUN_ORDER: list[str] = []
"""Labels of the :func:`stamp` tasks run in this process, in order."""

QUICK_RETRY = Retry.fixed(timedelta(milliseconds=100), max_attempts=3)


class FlakyError(Exception):
    """What :func:`flaky` raises on its first attempts."""


with override_settings(TASKS=TASKS):

    @task
    def add(a: int, b: int) -> int:
        return a + b

    @task(queue_name="emails")
    def shout(text: str, *, times: int = 1) -> dict[str, Any]:
        return {"text": text.upper() * times, "parts": [text, times]}

    @task(retry=QUICK_RETRY)
    def always_fails(message: str) -> None:
        raise ValueError(message)

    @task(takes_context=True, retry=QUICK_RETRY)
    def flaky(context: TaskContext, succeed_on: int) -> dict[str, Any]:
        """Fails until attempt ``succeed_on``; returns what its context said."""
        if context.attempt < succeed_on:
            raise FlakyError(f"attempt {context.attempt} fails")
        return describe(context)

    @task(takes_context=True)
    def introspect(context: TaskContext) -> dict[str, Any]:
        return describe(context)

    @task(takes_context=True, queue_name="reports")
    async def async_double(context: TaskContext, value: int) -> dict[str, Any]:
        await asyncio.sleep(0)
        return {"double": value * 2, **describe(context)}

    @task(max_attempts=1)
    async def async_fails(message: str) -> None:
        await asyncio.sleep(0)
        raise ValueError(message)

    @task(max_attempts=1)
    def once(value: str) -> str:
        return value

    @task
    def stamp(label: str) -> str:
        """Notes that it ran (in this process's :data:`RUN_ORDER`)."""
        RUN_ORDER.append(label)
        return label

    @task(timeout=0.2, max_attempts=1)
    def sleepy(seconds: float) -> str:
        time.sleep(seconds)
        return "woke up"

    @task
    def returns_a_set() -> Any:
        return {1, 2}


def describe(context: TaskContext) -> dict[str, Any]:
    result = context.task_result
    return {
        "attempt": context.attempt,
        "id": result.id,
        "status": str(result.status),
        "worker_ids": list(result.worker_ids),
        "errors": [error.exception_class_path for error in result.errors],
        "started": result.started_at.isoformat() if result.started_at else None,
        "task": result.task.module_path,
    }


def _log_signal(signal_name: str, task_result: TaskResult[Any, Any]) -> None:
    path = os.environ.get(SIGNAL_LOG_VARIABLE)
    if not path:
        return
    line = json.dumps(
        {
            "signal": signal_name,
            "id": task_result.id,
            "status": str(task_result.status),
            "attempt": task_result.attempts,
            "errors": len(task_result.errors),
            "pid": os.getpid(),
        }
    )
    descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
    try:
        os.write(descriptor, f"{line}\n".encode())
    finally:
        os.close(descriptor)


def _started(sender: object, task_result: TaskResult[Any, Any], **kwargs: object) -> None:
    _log_signal("started", task_result)


def _finished(sender: object, task_result: TaskResult[Any, Any], **kwargs: object) -> None:
    _log_signal("finished", task_result)


task_started.connect(_started, dispatch_uid="millrace-tests-started")
task_finished.connect(_finished, dispatch_uid="millrace-tests-finished")
