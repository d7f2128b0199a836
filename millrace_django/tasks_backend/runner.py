"""The job every enqueued task is: :func:`run_task` runs one attempt of one task on a
worker, between Django's ``task_started`` and ``task_finished``."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.tasks import TaskContext, TaskResult, TaskResultStatus, task_backends
from django.tasks.backends.base import BaseTaskBackend
from django.tasks.base import TaskError
from django.tasks.signals import task_finished, task_started
from django.utils.json import normalize_json

from millrace_django.contract import JobDetails, JobState
from millrace_django.engine import (
    CancelReason,
    JobContext,
    JobTimedOut,
    default_client,
    job,
    next_delay,
)
from millrace_django.engine.jsonvalues import json_problem
from millrace_django.engine.outcomes import error_text
from millrace_django.engine.retry import gives_up, raised_classes
from millrace_django.errors import MillraceError
from millrace_django.tasks_backend.attempts import TaskAttempt, TaskAttempts
from millrace_django.tasks_backend.result import job_details, local, task_result
from millrace_django.tasks_backend.stored_call import StoredCall, stored_task
from millrace_django.tasks_backend.task_errors import CANCELLED_PATH, TIMED_OUT_PATH, class_path

PACKAGE = "millrace_django.tasks_backend"


def _named_by_package[**P, R](function: Callable[P, R]) -> Callable[P, R]:
    """Name ``function`` after the package, which re-exports it: every queued task's job
    names its runner ``millrace_django.tasks_backend:run_task``, as it was named before
    the package had modules, so moving it within the package strands no task."""
    function.__module__ = PACKAGE
    return function


@job
@_named_by_package
def run_task(
    context: JobContext,
    *,
    task_path: str,
    args: list[Any],
    kwargs: dict[str, Any],
    backend: str,
    run_after: str | None = None,
    options: dict[str, Any] | None = None,
) -> Any:
    """Run one enqueued Django task: the job each ``task.enqueue()`` stores.

    Records the attempt's start (worker, time) in the job's checkpoint, sends
    ``task_started``, calls the task (with a ``TaskContext`` when it takes one; async
    functions through ``Task.call``), sends ``task_finished`` and returns the task's
    return value, which becomes the job's result. An exception is re-raised after
    ``task_finished`` so Millrace records the failure and retries per the job's policy.
    """
    call = StoredCall(task_path, args, kwargs, backend, run_after, options)
    return _Attempt(context, call).run()


RUN_TASK_TARGET = run_task.target
"""The target of every task job: renaming :func:`run_task` would strand queued tasks."""


class ClaimLost(MillraceError):
    """The job is no longer this worker's to run (its lease moved on); nothing ran."""


class _Attempt:
    """One attempt of one task, on a worker thread."""

    def __init__(self, context: JobContext, call: StoredCall) -> None:
        self.context = context
        self.call = call
        self.client = default_client()

    def run(self) -> Any:
        details, attempts = self._record_start()
        sender: type[BaseTaskBackend] | None = None
        result: TaskResult[Any, Any] | None = None  # set once task_started was sent
        try:
            sender = type(task_backends[self.call.backend])
            task = stored_task(self.call, details)
            running = task_result(task, details, self.call, attempts)
            task_started.send(sender=sender, task_result=running)
            result = running
            if task.takes_context:
                value = task.call(
                    TaskContext(task_result=result), *self.call.args, **self.call.kwargs
                )
            else:
                value = task.call(*self.call.args, **self.call.kwargs)
            value = _storable(value)
        except BaseException as error:  # KeyboardInterrupt too: the task's, not a stop
            path = class_path(type(error))
            self._record_raised(attempts, path)
            if (
                result is not None
                and sender is not None
                and self._finish(details, result, failure=(path, error))
            ):
                task_finished.send_robust(sender=sender, task_result=result)
            raise
        assert result is not None and sender is not None
        if self._finish(details, result, value=value):
            task_finished.send_robust(sender=sender, task_result=result)
        return value

    def _record_start(self) -> tuple[JobDetails, TaskAttempts]:
        """Record the start of this attempt, fenced by the claim, before anything runs."""
        job_id, attempt = self.context.job_id, self.context.attempt
        details = job_details(self.client.storage, job_id)
        summary = details.summary if details is not None else None
        if (
            details is None
            or summary is None
            or summary.state is not JobState.PROCESSING
            or summary.worker_id is None
            or summary.attempt != attempt
        ):
            raise ClaimLost(f"job {job_id} attempt {attempt} is no longer claimed here")
        start = TaskAttempt(attempt, summary.worker_id, self.client.clock.now())
        attempts = TaskAttempts.from_checkpoint(details.checkpoint).started(start)
        if not self.context.checkpoint(attempts.to_checkpoint()):
            raise ClaimLost(f"job {job_id} attempt {attempt} is no longer claimed here")
        return details, attempts

    def _record_raised(self, attempts: TaskAttempts, path: str) -> None:
        """Name the class this attempt raised in the record, unless the cancellation
        decides the outcome. A write that fails loses only the name (read back, the error
        is named from its text): never the task's own exception."""
        if self.context.cancel_reason is not None:
            return
        with contextlib.suppress(Exception):
            self.context.checkpoint(attempts.raised(self.context.attempt, path).to_checkpoint())

    def _finish(
        self,
        details: JobDetails,
        result: TaskResult[Any, Any],
        *,
        value: Any = None,
        failure: tuple[str, BaseException] | None = None,
    ) -> bool:
        """Make ``result`` say what Millrace will record for this attempt (the
        worker's cancellation wins over what the task did, as in the engine); ``False``
        when another worker owns the job now, so this attempt ends without a verdict."""
        reason = self.context.cancel_reason
        now = local(self.client.clock.now())
        if reason in (CancelReason.LEASE_LOST, CancelReason.SUPERSEDED):
            return False
        if reason is CancelReason.SHUTDOWN:  # released: it runs again, no failure spent
            object.__setattr__(result, "status", TaskResultStatus.READY)
            return True
        if reason is CancelReason.REQUESTED:
            result.errors.append(
                TaskError(exception_class_path=CANCELLED_PATH, traceback="Cancelled by request.")
            )
            object.__setattr__(result, "status", TaskResultStatus.FAILED)
            object.__setattr__(result, "finished_at", now)
            return True
        if reason is CancelReason.TIMEOUT or failure is not None:
            if failure is None or reason is CancelReason.TIMEOUT:
                raised: BaseException = JobTimedOut(details.timeout or timedelta(0))
                error = TaskError(exception_class_path=TIMED_OUT_PATH, traceback=str(raised))
            else:
                path, raised = failure
                error = TaskError(exception_class_path=path, traceback=error_text(raised))
            result.errors.append(error)
            final = (
                gives_up(details.retry, raised_classes(raised))
                or next_delay(details.retry, details.summary.failures + 1) is None
            )
            object.__setattr__(
                result, "status", TaskResultStatus.FAILED if final else TaskResultStatus.READY
            )
            if final:
                object.__setattr__(result, "finished_at", now)
            return True
        object.__setattr__(result, "status", TaskResultStatus.SUCCESSFUL)
        object.__setattr__(result, "finished_at", now)
        object.__setattr__(result, "_return_value", value)
        return True


def _storable(value: Any) -> Any:
    """The return value as Django normalizes it, refused unless JSON keeps it unchanged
    (the job's result is stored as JSON)."""
    value = normalize_json(value)
    problem = json_problem(value)
    if problem is not None:
        raise TypeError(f"the task returned a value that cannot be stored: it {problem}")
    return value
