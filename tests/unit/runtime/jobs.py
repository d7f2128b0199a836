"""Module-level jobs the runtime tests run; they coordinate with the test via ``board``."""

from __future__ import annotations

import asyncio
import threading
from datetime import timedelta
from typing import Any

from millrace_django.engine import JobContext, Retry, job

WAIT = 10.0
"""The longest a job waits for the test (a safety net; tests open gates well before)."""


class Board:
    """Named events and a log shared by a test and the jobs it runs (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._events: dict[str, threading.Event] = {}
        self._calls: list[tuple[Any, ...]] = []

    def event(self, name: str) -> threading.Event:
        with self._lock:
            return self._events.setdefault(name, threading.Event())

    def record(self, *call: Any) -> None:
        with self._lock:
            self._calls.append(call)

    @property
    def calls(self) -> list[tuple[Any, ...]]:
        with self._lock:
            return list(self._calls)

    def open_all(self) -> None:
        with self._lock:
            events = list(self._events.values())
        for event in events:
            event.set()

    def reset(self) -> None:
        self.open_all()
        with self._lock:
            self._events.clear()
            self._calls.clear()


board = Board()


@job
def record(label: str) -> str:
    board.record("record", label)
    return label


@job
def notify_ops(dead_job_id: str) -> None:
    board.record("notify_ops", dead_job_id)


@job(retry=Retry.none(), failure_observers=[notify_ops])
def explode(message: str) -> None:
    raise RuntimeError(message)


@job(retry=Retry.none())
async def async_explode(message: str) -> None:
    await asyncio.sleep(0)
    raise RuntimeError(message)


@job(retry=Retry.none())
def explode_while_handling(message: str) -> None:
    """Raises while handling another exception: the stored text keeps both."""
    try:
        {}["missing"]
    except KeyError as error:
        raise RuntimeError(message) from error


STOPS: dict[str, type[BaseException]] = {
    "KeyboardInterrupt": KeyboardInterrupt,
    "SystemExit": SystemExit,
    "GeneratorExit": GeneratorExit,
    "CancelledError": asyncio.CancelledError,
}
"""Exceptions outside ``Exception`` that a job may raise, by name."""


@job(retry=Retry.fixed(timedelta(seconds=10), 2))
def interrupt(kind: str) -> None:
    """Raises the ``BaseException`` named ``kind`` (as a job calling ``sys.exit`` or
    hit by a stray ``KeyboardInterrupt`` of its own does)."""
    raise STOPS[kind](f"{kind} raised by the job")


@job(retry=Retry.fixed(timedelta(seconds=10), 2))
async def async_interrupt(kind: str) -> None:
    await asyncio.sleep(0)
    raise STOPS[kind](f"{kind} raised by the job")


@job(retry=Retry.fixed(timedelta(seconds=10), 3))
def flaky(label: str, failures: int, context: JobContext) -> str:
    """Fails its first ``failures`` attempts."""
    board.record("flaky", context.attempt)
    if context.attempt <= failures:
        raise RuntimeError(f"attempt {context.attempt} fails")
    return label


@job
def hold(name: str) -> str:
    """Ignores cancellation: returns only once the test opens the gate ``name``."""
    board.event(f"{name}:started").set()
    board.event(name).wait(WAIT)
    board.record("hold", name, "returned")
    return name


@job
def cooperate(name: str, context: JobContext) -> str:
    """Runs until its cancellation fires, then stops by raising."""
    board.event(f"{name}:started").set()
    context.cancelled.wait(WAIT)
    context.raise_if_cancelled()
    return name


@job
def stubborn(name: str, context: JobContext) -> str:
    """Notes its cancellation, then keeps running until the gate ``name`` opens."""
    board.event(f"{name}:started").set()
    context.cancelled.wait(WAIT)
    board.record("stubborn", name, context.cancel_reason)
    board.event(name).wait(WAIT)
    board.record("stubborn", name, "returned")
    return name


@job
def report(name: str, context: JobContext) -> str:
    context.report_progress(0.5)
    context.log("half way")
    board.event(f"{name}:started").set()
    board.event(name).wait(WAIT)
    return name


@job
async def async_double(n: int) -> dict[str, Any]:
    await asyncio.sleep(0)
    return {"value": 2 * n, "thread": threading.current_thread().name}


@job
def again() -> None:
    """Enqueues itself forever."""
    again.enqueue()


@job
async def async_gate(name: str) -> str:
    """Runs until the test opens ``name``'s gate, waiting on the loop (never blocking it)."""
    board.record("async_started", name, threading.current_thread().name)
    gate = board.event(name)
    for _ in range(int(WAIT / 0.002)):
        if gate.is_set():
            break
        await asyncio.sleep(0.002)
    return name


@job
async def async_stubborn(name: str, context: JobContext) -> str:
    """Notes its cancellation and ignores it; records it if the worker cancels its task."""
    board.event(f"{name}:started").set()
    noticed = False
    try:
        for _ in range(int(WAIT / 0.002)):
            if context.cancelled.is_set() and not noticed:
                noticed = True
                board.record("async_stubborn", name, context.cancel_reason)
            await asyncio.sleep(0.002)
    except asyncio.CancelledError:
        board.record("async_stubborn", name, "task cancelled", context.cancel_reason)
        raise
    return name


@job(retry=Retry.fixed(timedelta(seconds=10), 3))
def resumable(items: int, fail_at: int, context: JobContext) -> int:
    """Works through ``items`` steps, checkpointing after each; the first attempt fails
    at step ``fail_at``. Returns the step it resumed from."""
    start = context.last_checkpoint or 0
    assert isinstance(start, int)
    board.record("resumable", context.attempt, start)
    for step in range(start, items):
        if step == fail_at and context.attempt == 1:
            raise RuntimeError(f"failed at step {step}")
        context.checkpoint(step + 1)
    return start
