"""Hard timeouts: one attempt run in a child process that the worker kills at the limit.

A job with a ``hard_timeout`` runs in a fresh interpreter started with
:mod:`multiprocessing`'s ``spawn`` method: a fork would copy the worker's threads mid-step
(their locks included) and share its open database connections with the child. The
child sets its host up (Django, through the setup the edge registers with
:func:`set_child_setup`), opens its own connections, imports the job and calls it; the
worker thread meanwhile waits on a pipe, and the worker's heartbeat keeps renewing the
lease as for any job. The child sends back, as plain data: that it started, its progress
and log lines, and then its result or the text and class names of the exception it
raised (an exception itself need not pickle). The worker writes the outcome through the
normal fenced transition.

At the limit, counted from the function's start (and, before it, from the process's),
the child gets SIGTERM, which raises ``SystemExit`` in the job so that its ``finally``
blocks run, then SIGKILL after :data:`KILL_GRACE` seconds; the attempt fails with
:class:`~millrace_django.engine.errors.HardTimeoutExceeded`. A cancellation of the
attempt's context (a cancel request, the cooperative timeout, shutdown, a lost lease) is
forwarded to the child's context, and the child is killed if it has not ended
:data:`KILL_GRACE` seconds later; the cancellation's reason decides the outcome, as
in-process.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from multiprocessing import get_context
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from types import FrameType
from typing import Any
from uuid import UUID

from millrace_django.clock import SystemClock
from millrace_django.contract import JSON, JobRecord
from millrace_django.engine import (
    CancelReason,
    JobCancelled,
    JobContext,
    PreparedJob,
    resolve,
    run_handler,
)
from millrace_django.engine.errors import FailedInChild, HardTimeoutExceeded
from millrace_django.engine.job_context import Progress
from millrace_django.engine.jsonvalues import json_problem
from millrace_django.engine.outcomes import error_text, unstorable_result
from millrace_django.engine.retry import raised_classes

KILL_GRACE = 3.0
"""Seconds between SIGTERM and SIGKILL, and between a forwarded cancellation and the kill."""

REPORT_INTERVAL = 0.2
"""How often the child sends the progress and log lines its job reported (seconds)."""

_WATCH_INTERVAL = 0.1
"""How often the waiting worker thread looks at its context's cancellation (seconds)."""

CHILD_START_UP = 60.0
"""Seconds a child may take to start (a fresh interpreter setting Django up: about a
second here, several on a loaded machine) before the job's function runs, whatever its
hard timeout: the limit counts the job's own run, not the interpreter's start."""

type ChildSetup = Callable[[], None]
"""Run first in the child (picklable: the parent sends it); sets the host up."""

_setup_factory: Callable[[], ChildSetup] | None = None


def set_child_setup(factory: Callable[[], ChildSetup] | None) -> None:
    """Have each child run ``factory()``'s setup first; the factory is called in the
    worker at each start, so the setup can carry what the worker knows then (the edge
    passes its database names: a test run renames them)."""
    global _setup_factory
    _setup_factory = factory


def run_attempt(
    job: JobRecord,
    prepared: PreparedJob,
    context: JobContext,
    *,
    loop: asyncio.AbstractEventLoop | None = None,
) -> object:
    """Call the job's function, in a child process when the job has a hard timeout."""
    if job.hard_timeout is None:
        return run_handler(prepared, context, loop=loop)
    return run_in_child(job, prepared, context, job.hard_timeout)


@dataclass(frozen=True, slots=True)
class _Call:
    target: str
    args: list[Any]
    kwargs: dict[str, Any]
    job_id: UUID
    attempt: int
    tenant: str | None
    setup: ChildSetup | None
    last_checkpoint: JSON = None


@dataclass(frozen=True, slots=True)
class _Started:
    """The child is set up and calls the function now."""


@dataclass(frozen=True, slots=True)
class _Report:
    progress: Progress | None
    logs: tuple[str, ...]
    checkpoint: tuple[JSON] | tuple[()] = ()
    """The checkpoint the job saved last since the previous report, if it saved one."""


class _ChildCheckpoints:
    """A child's checkpoints, handed to the worker with its next report: the worker
    saves them under its fence (the child has no lease of its own)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pending: tuple[JSON] | tuple[()] = ()

    def put(self, data: JSON) -> bool:
        with self._lock:
            self._pending = (data,)
        return True

    def take(self) -> tuple[JSON] | tuple[()]:
        with self._lock:
            pending, self._pending = self._pending, ()
        return pending


@dataclass(frozen=True, slots=True)
class _Returned:
    value: object


@dataclass(frozen=True, slots=True)
class _Failed:
    text: str
    class_names: tuple[str, ...] | None


def run_in_child(
    job: JobRecord, prepared: PreparedJob, context: JobContext, limit: timedelta
) -> object:
    """Run the attempt in a child process killed at ``limit``; its result, or raise its
    failure."""
    spawn = get_context("spawn")
    ours, theirs = spawn.Pipe()
    call = _Call(
        target=prepared.definition.target,
        args=prepared.args,
        kwargs=prepared.kwargs,
        job_id=job.id,
        attempt=job.attempt,
        tenant=job.tenant_id,
        setup=_setup_factory() if _setup_factory is not None else None,
        last_checkpoint=context.last_checkpoint,
    )
    process = spawn.Process(
        target=_child_main, args=(theirs, call), name=f"millrace-job-{job.id}", daemon=True
    )
    process.start()
    theirs.close()
    try:
        return _await(process, ours, context, limit)
    finally:
        ours.close()  # (a child still running sees its end close, and exits)
        _reap(process)


def _await(process: BaseProcess, ours: Connection, context: JobContext, limit: timedelta) -> object:
    """The child's result, or raise its failure; kill it at the limit (raising
    :class:`HardTimeoutExceeded`) or :data:`KILL_GRACE` seconds after a forwarded
    cancellation (raising :class:`JobCancelled`; the reason decides the outcome)."""
    seconds = limit.total_seconds()
    overrun = time.monotonic() + max(seconds, CHILD_START_UP)  # until the function starts
    cancelled: CancelReason | None = None
    grace_ends = float("inf")
    while True:
        if cancelled is None and context.cancel_reason is not None:
            cancelled = context.cancel_reason
            with contextlib.suppress(OSError):
                ours.send(cancelled.value)
            grace_ends = time.monotonic() + KILL_GRACE
        remaining = min(overrun, grace_ends) - time.monotonic()
        if remaining <= 0:
            _kill(process)
            if cancelled is not None:
                raise JobCancelled(f"job {context.job_id} was cancelled ({cancelled}); killed")
            raise HardTimeoutExceeded(limit)
        ready = wait([ours, process.sentinel], timeout=min(remaining, _WATCH_INTERVAL))
        if ours in ready:
            try:
                message = ours.recv()
            except EOFError:
                message = None
            if isinstance(message, _Started):
                overrun = time.monotonic() + seconds
            elif isinstance(message, _Report):
                _relay(message, context)
            elif isinstance(message, _Returned):
                return message.value
            elif isinstance(message, _Failed):
                raise FailedInChild(message.text, message.class_names)
            elif message is None:
                raise _died(process)
        elif process.sentinel in ready:
            raise _died(process)


def _relay(report: _Report, context: JobContext) -> None:
    for data in report.checkpoint:
        context.checkpoint(data)
    if report.progress is not None:
        context.report_progress(report.progress)
    for line in report.logs:
        context.log(line)


def _died(process: BaseProcess) -> FailedInChild:
    process.join(KILL_GRACE)
    return FailedInChild(
        f"The job's process exited (exit code {process.exitcode}) before it finished.", None
    )


def _kill(process: BaseProcess) -> None:
    """SIGTERM, then SIGKILL after :data:`KILL_GRACE` seconds."""
    process.terminate()
    process.join(KILL_GRACE)
    if process.is_alive():
        process.kill()


def _reap(process: BaseProcess) -> None:
    """Wait for the child to exit (it does once it has answered), killing it if it
    has not within :data:`KILL_GRACE` seconds."""
    process.join(KILL_GRACE)
    if process.is_alive():
        _kill(process)
    process.join()
    process.close()


# -- in the child ---------------------------------------------------------------------------


def _child_main(conn: Connection, call: _Call) -> None:
    """The child's entry point: set up, run the job, send back how it ended."""
    signal.signal(signal.SIGTERM, _exit_on_terminate)
    checkpoints = _ChildCheckpoints()
    context = JobContext(
        job_id=call.job_id,
        attempt=call.attempt,
        tenant=call.tenant,
        clock=SystemClock(),
        last_checkpoint=call.last_checkpoint,
        save_checkpoint=checkpoints.put,
    )
    sending = threading.Lock()
    threading.Thread(
        target=_listen,
        args=(conn, context, checkpoints, sending),
        name="millrace-child-link",
        daemon=True,
    ).start()
    ended: _Returned | _Failed
    try:
        if call.setup is not None:
            call.setup()
        prepared = PreparedJob(resolve(call.target), call.args, call.kwargs)
        with sending:
            conn.send(_Started())
        result = run_handler(prepared, context)
    except BaseException as error:  # the job's failure, whatever it is
        ended = _Failed(error_text(error), raised_classes(error))
    else:
        problem = json_problem(result)  # (checked here: a value JSON cannot store may not pickle)
        ended = _Returned(result) if problem is None else _Failed(unstorable_result(problem), None)
    with sending:
        _send_report(conn, context, checkpoints)
        conn.send(ended)


def _listen(
    conn: Connection, context: JobContext, checkpoints: _ChildCheckpoints, sending: threading.Lock
) -> None:
    """Forward the worker's cancellation to the job and the job's reports to the worker;
    end the process when the worker is gone (its end of the pipe closed)."""
    while True:
        try:
            if conn.poll(REPORT_INTERVAL):
                context.cancel(CancelReason(conn.recv()))
            with sending:
                _send_report(conn, context, checkpoints)
        except (EOFError, OSError):
            os._exit(1)


def _send_report(conn: Connection, context: JobContext, checkpoints: _ChildCheckpoints) -> None:
    report = context.take_report()
    checkpoint = checkpoints.take()
    if report.progress is not None or report.logs or checkpoint:
        logs = tuple(line.message for line in report.logs)
        conn.send(_Report(report.progress, logs, checkpoint))


def _exit_on_terminate(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(f"killed by signal {signum}")
