"""Millrace as the backend of Django's Tasks framework (``django.tasks``)::

    TASKS = {"default": {"BACKEND": "millrace_django.tasks_backend.MillraceBackend"}}

Each ``task.enqueue()`` stores an ordinary Millrace job whose target is :func:`run_task`
and whose arguments are the task's module path, its JSON arguments and the backend
alias; the job carries the task's queue, priority, ``run_after`` (as its due time) and
Millrace options (retry policy, timeout, idempotency key). Workers need nothing new:
they run :func:`run_task`, which imports the task by its path, sends ``task_started``
and ``task_finished``, and returns the task's return value as the job's result. The
task id is the job's UUID as a string, so the dashboard shows the same id.

``get_result`` rebuilds a ``TaskResult`` from the stored job: the task is the very
object the module defines (so ``Task.get_result`` never reports a mismatch), with the
priority, queue, ``run_after`` and options it was enqueued with, so the result equals
the one ``enqueue()`` returned. See ``docs/django-tasks.md``.
"""

from __future__ import annotations

import inspect
import math
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any
from uuid import UUID

from django.conf import settings
from django.core.checks import CheckMessage
from django.core.exceptions import ImproperlyConfigured
from django.db import transaction
from django.tasks import Task, TaskContext, TaskResult, TaskResultStatus, task_backends
from django.tasks.backends.base import BaseTaskBackend
from django.tasks.base import TaskError
from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
from django.tasks.signals import task_enqueued, task_finished, task_started
from django.utils import timezone
from django.utils.json import normalize_json
from django.utils.module_loading import import_string

from millrace_django.contract import (
    TERMINAL_JOB_STATES,
    JobDetails,
    JobLogLine,
    JobState,
    JobStorage,
    MonitoringStorage,
    ProgressReport,
    RetryKind,
    RetrySpec,
)
from millrace_django.engine import (
    CancelReason,
    InvalidJobArguments,
    InvalidRetry,
    JobClient,
    JobContext,
    JobTimedOut,
    Retry,
    UnknownQueue,
    UnresolvableTarget,
    default_client,
    job,
    next_delay,
    validate_retry,
)
from millrace_django.engine.jsonvalues import json_problem
from millrace_django.engine.outcomes import error_text
from millrace_django.engine.retry import (
    ExceptionClasses,
    exception_classes,
    gives_up,
    raised_classes,
)
from millrace_django.errors import MillraceError
from millrace_django.tasks import attempts
from millrace_django.tasks.declared import declared_changes, declared_options

if TYPE_CHECKING:
    _TaskBase = Task[Any, Any]
else:
    _TaskBase = Task

OPTION_NAMES = frozenset({"RETRY"})
"""Keys ``TASKS[alias]["OPTIONS"]`` accepts."""


# -- per-task options ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True, kw_only=True)
class MillraceTask(_TaskBase):
    """A ``django.tasks.Task`` with Millrace's per-task options, given to ``@task(...)``
    (Django 6.1 forwards extra keywords to the backend's ``task_class``) or to
    ``using(...)``:

    - ``max_attempts``: runs in all, the first included (``1``: never retried); applied
      to ``retry`` or to the default policy;
    - ``retry``: a policy from :class:`millrace_django.Retry`;
    - ``timeout``: a ``timedelta`` (or seconds) after which a run counts as failed;
    - ``idempotency_key``: while a job holding this key is waiting or running,
      enqueueing again returns that job's result instead of storing another;
    - ``retry_on`` and ``give_up_on``: exception classes (one or a tuple) that decide
      which failures the policy may retry, as on ``@job``.
    """

    max_attempts: int | None = None
    retry: RetrySpec | None = None
    timeout: timedelta | None = None
    idempotency_key: str | None = None
    retry_on: ExceptionClasses | None = None
    give_up_on: ExceptionClasses | None = None

    def __post_init__(self) -> None:
        timeout: object = self.timeout
        if type(timeout) in (int, float) and math.isfinite(timeout):  # type: ignore[arg-type]
            object.__setattr__(self, "timeout", timedelta(seconds=timeout))  # type: ignore[arg-type]
        for option in ("retry_on", "give_up_on"):
            if isinstance(getattr(self, option), type):  # one class: as a tuple, like @job
                object.__setattr__(self, option, (getattr(self, option),))
        Task.__post_init__(self)  # zero-argument super() does not work in slotted dataclasses

    def using(  # type: ignore[override]
        self,
        *,
        priority: int | None = None,
        queue_name: str | None = None,
        run_after: datetime | None = None,
        backend: str | None = None,
        max_attempts: int | None = None,
        retry: RetrySpec | None = None,
        timeout: timedelta | float | None = None,
        idempotency_key: str | None = None,
        retry_on: ExceptionClasses | None = None,
        give_up_on: ExceptionClasses | None = None,
    ) -> MillraceTask:
        """This task with other options (``None`` keeps the current value)."""
        changes: dict[str, Any] = {
            "priority": priority,
            "queue_name": queue_name,
            "run_after": run_after,
            "backend": backend,
            "max_attempts": max_attempts,
            "retry": retry,
            "timeout": timeout,
            "idempotency_key": idempotency_key,
            "retry_on": retry_on,
            "give_up_on": give_up_on,
        }
        return replace(
            self, **{name: value for name, value in changes.items() if value is not None}
        )


def option_problem(task: Task[Any, Any]) -> str | None:
    """Why the task's Millrace options are unusable, or ``None``."""
    max_attempts = getattr(task, "max_attempts", None)
    if max_attempts is not None and (type(max_attempts) is not int or max_attempts < 1):
        return f"max_attempts must be an integer of at least 1; got {max_attempts!r}."
    retry = getattr(task, "retry", None)
    if retry is not None:
        if not isinstance(retry, RetrySpec):
            return f"retry must be a policy from millrace_django.Retry; got {retry!r}."
        try:
            validate_retry(retry)
        except InvalidRetry as error:
            return f"retry is invalid: {error}."
    timeout = getattr(task, "timeout", None)
    if timeout is not None and (not isinstance(timeout, timedelta) or timeout <= timedelta(0)):
        return f"timeout must be a positive timedelta or number of seconds; got {timeout!r}."
    key = getattr(task, "idempotency_key", None)
    if key is not None and (not isinstance(key, str) or not key.strip()):
        return f"idempotency_key must be a non-blank string; got {key!r}."
    for option in ("retry_on", "give_up_on"):
        classes = getattr(task, option, None)
        if classes is not None:
            try:
                exception_classes(option, classes)
            except InvalidRetry as error:
                return f"{error}."
    return None


def options_problems(options: Mapping[str, Any]) -> list[str]:
    """What is wrong with a backend's ``OPTIONS`` (empty when nothing is)."""
    if not isinstance(options, Mapping):
        return [f"OPTIONS must be a dict; got {options!r}."]
    problems = [
        f"OPTIONS has an unknown key {key!r}; known: {', '.join(sorted(OPTION_NAMES))}."
        for key in options
        if key not in OPTION_NAMES
    ]
    retry = options.get("RETRY")
    if retry is not None:
        if not isinstance(retry, RetrySpec):
            problems.append(
                f"OPTIONS['RETRY'] must be a policy from millrace_django.Retry; got {retry!r}."
            )
        else:
            try:
                validate_retry(retry)
            except InvalidRetry as error:
                problems.append(f"OPTIONS['RETRY'] is invalid: {error}.")
    return problems


# -- the backend ------------------------------------------------------------------------------


class MillraceBackend(BaseTaskBackend):
    """Stores tasks as Millrace jobs; Millrace workers run them.

    ``QUEUES`` must name queues of ``MILLRACE['QUEUES']`` (the system check says so).
    ``OPTIONS`` may hold ``RETRY``, the retry policy of this alias's tasks that name
    none (default: ``MILLRACE['DEFAULT_RETRY']``). Enqueueing uses the process's default
    job client, the same storage the workers use.
    """

    task_class = MillraceTask
    supports_defer = True
    supports_async_task = True
    supports_get_result = True
    supports_priority = True

    def validate_task(self, task: Task[Any, Any]) -> None:
        super().validate_task(task)
        problem = option_problem(task)
        if problem is not None:
            raise InvalidTask(problem)

    def enqueue(self, task: Task[Any, Any], args: Any, kwargs: Any) -> TaskResult[Any, Any]:
        self.validate_task(task)
        client = default_client()
        call_args: list[Any] = list(normalize_json(list(args)))  # type: ignore[arg-type]
        call_kwargs: dict[str, Any] = dict(normalize_json(dict(kwargs)))  # type: ignore[arg-type]
        _check_arguments(task, call_args, call_kwargs)
        stored: dict[str, Any] = {
            "task_path": task.module_path,
            "args": call_args,
            "kwargs": call_kwargs,
            "backend": self.alias,
        }
        if task.run_after is not None:
            stored["run_after"] = task.run_after.isoformat()
        options = declared_options(task)
        if options:
            stored["options"] = options
        due_at = _due_at(task.run_after, client)
        runner = run_task.using(
            queue=task.queue_name,
            priority=int(task.priority),
            retry=self._retry_for(task, client.config.default_retry),
            timeout=getattr(task, "timeout", None),
            idempotency_key=getattr(task, "idempotency_key", None),
            retry_on=getattr(task, "retry_on", None),
            give_up_on=getattr(task, "give_up_on", None),
        )
        try:
            record = client.build(
                runner,
                (),
                stored,
                state=JobState.ENQUEUED if due_at is None else JobState.SCHEDULED,
                key=None,
                due_at=due_at,
            )
        except UnknownQueue as error:
            raise InvalidTask(
                f"Queue '{task.queue_name}' is not served by Millrace: {error}. "
                "Add it to MILLRACE['QUEUES']."
            ) from error
        (stored_id,) = client.store([record])
        if stored_id != record.id:
            return self._holder_of_key(stored_id, record.idempotency_key)
        result: TaskResult[Any, Any] = TaskResult(
            task=task,
            id=str(record.id),
            status=TaskResultStatus.READY,
            enqueued_at=_local(record.created_at),
            started_at=None,
            finished_at=None,
            last_attempted_at=None,
            args=call_args,
            kwargs=call_kwargs,
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )
        _after_commit(client.storage, lambda: task_enqueued.send(type(self), task_result=result))
        return result

    def get_result(self, result_id: str) -> TaskResult[Any, Any]:
        try:
            job_id = UUID(str(result_id))
        except ValueError:
            raise TaskResultDoesNotExist(result_id) from None
        details = _monitoring(default_client().storage).get_job_details(job_id)
        call = _stored_call(details) if details is not None else None
        if details is None or call is None or call.backend != self.alias:
            raise TaskResultDoesNotExist(result_id)
        return _result(_stored_task(call, details), details, call)

    def check(self, **kwargs: Any) -> list[CheckMessage]:
        from millrace_django.tasks.checks import backend_problems

        return backend_problems(self)

    # -- inside ---------------------------------------------------------------------------

    def _retry_for(self, task: Task[Any, Any], default: RetrySpec) -> RetrySpec:
        """The task's policy, else this alias's ``OPTIONS['RETRY']``, else ``default``;
        with ``max_attempts`` applied on top."""
        base = getattr(task, "retry", None) or self._options_retry() or default
        max_attempts: int | None = getattr(task, "max_attempts", None)
        if max_attempts is None:
            return base
        if max_attempts == 1:
            return Retry.none()
        if base.kind is RetryKind.NONE:
            return Retry.exponential(max_attempts)
        return validate_retry(replace(base, max_attempts=max_attempts))

    def _options_retry(self) -> RetrySpec | None:
        problems = options_problems(self.options)
        if problems:
            raise ImproperlyConfigured(f"TASKS[{self.alias!r}]: {' '.join(problems)}")
        retry: RetrySpec | None = self.options.get("RETRY")
        return retry

    def _holder_of_key(self, job_id: UUID, key: str | None) -> TaskResult[Any, Any]:
        """The result of the active job already holding the idempotency key."""
        try:
            return self.get_result(str(job_id))
        except TaskResultDoesNotExist:
            raise InvalidTask(
                f"idempotency key {key!r} is held by job {job_id}, which is not a task of "
                f"backend {self.alias!r}"
            ) from None


# -- the runner (the job every enqueued task is) --------------------------------------------


@job
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

    Records the attempt's start (worker, time) in the job's log, sends
    ``task_started``, calls the task (with a ``TaskContext`` when it takes one; async
    functions through ``Task.call``), sends ``task_finished`` and returns the task's
    return value, which becomes the job's result. An exception is re-raised after
    ``task_finished`` so Millrace records the failure and retries per the job's policy.
    """
    call = _StoredCall(task_path, args, kwargs, backend, run_after, options)
    return _Run(context, call).run()


RUN_TASK_TARGET = run_task.target
"""The target of every task job: renaming :func:`run_task` would strand queued tasks."""


class ClaimLost(MillraceError):
    """The job is no longer this worker's to run (its lease moved on); nothing ran."""


class _Run:
    """One attempt of one task, on a worker thread."""

    def __init__(self, context: JobContext, call: _StoredCall) -> None:
        self.context = context
        self.call = call
        self.client = default_client()
        self.jobs = self.client.storage
        self.monitoring = _monitoring(self.jobs)

    def run(self) -> Any:
        details, start = self._record_start()
        sender: type[BaseTaskBackend] | None = None
        result: TaskResult[Any, Any] | None = None  # set once task_started was sent
        try:
            sender = type(task_backends[self.call.backend])
            task = _stored_task(self.call, details)
            running = _result(task, replace(details, logs=(*details.logs, start)), self.call)
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
            path = attempts.class_path(type(error))
            if self.context.cancel_reason is None:  # else the cancellation decides
                self.context.log(attempts.raised_line(self.context.attempt, path))
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

    def _record_start(self) -> tuple[JobDetails, JobLogLine]:
        """Log the start of this attempt, fenced by the claim, before anything runs."""
        job_id, attempt = self.context.job_id, self.context.attempt
        details = self.monitoring.get_job_details(job_id)
        summary = details.summary if details is not None else None
        if (
            details is None
            or summary is None
            or summary.state is not JobState.PROCESSING
            or summary.worker_id is None
            or summary.attempt != attempt
        ):
            raise ClaimLost(f"job {job_id} attempt {attempt} is no longer claimed here")
        start = JobLogLine(
            at=self.client.clock.now(),
            message=attempts.started_line(attempt, summary.worker_id),
        )
        report = ProgressReport(
            job_id=job_id, worker_id=summary.worker_id, attempt=attempt, logs=(start,)
        )
        if not self.jobs.report_progress(report):
            raise ClaimLost(f"job {job_id} attempt {attempt} is no longer claimed here")
        return details, start

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
        now = _local(self.client.clock.now())
        if reason in (CancelReason.LEASE_LOST, CancelReason.SUPERSEDED):
            return False
        if reason is CancelReason.SHUTDOWN:  # released: it runs again, no failure spent
            object.__setattr__(result, "status", TaskResultStatus.READY)
            return True
        if reason is CancelReason.REQUESTED:
            result.errors.append(
                TaskError(
                    exception_class_path=attempts.CANCELLED_PATH, traceback="Cancelled by request."
                )
            )
            object.__setattr__(result, "status", TaskResultStatus.FAILED)
            object.__setattr__(result, "finished_at", now)
            return True
        if reason is CancelReason.TIMEOUT or failure is not None:
            if failure is None or reason is CancelReason.TIMEOUT:
                raised: BaseException = JobTimedOut(details.timeout or timedelta(0))
                error = TaskError(
                    exception_class_path=attempts.TIMED_OUT_PATH, traceback=str(raised)
                )
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


# -- helpers ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _StoredCall:
    """What :func:`run_task` was enqueued with."""

    task_path: str
    args: list[Any]
    kwargs: dict[str, Any]
    backend: str
    run_after: str | None
    options: dict[str, Any] | None
    """The options the task declared that the job keeps only resolved
    (:mod:`millrace_django.tasks.declared`)."""


def _stored_call(details: JobDetails) -> _StoredCall | None:
    """The task call stored in a job, or ``None`` if the job is not a task's."""
    invocation = details.invocation
    if invocation.target != RUN_TASK_TARGET or invocation.args:
        return None
    stored = invocation.kwargs
    task_path, args, kwargs = stored.get("task_path"), stored.get("args"), stored.get("kwargs")
    backend, run_after = stored.get("backend"), stored.get("run_after")
    options = stored.get("options")
    if not (
        isinstance(task_path, str)
        and isinstance(args, list)
        and isinstance(kwargs, dict)
        and isinstance(backend, str)
        and (run_after is None or isinstance(run_after, str))
        and (options is None or isinstance(options, dict))
    ):
        return None
    return _StoredCall(task_path, args, kwargs, backend, run_after, options)


def _stored_task(call: _StoredCall, details: JobDetails) -> Task[Any, Any]:
    """The task object the module defines, with the options it was enqueued with, as it
    declared them (equal to the task ``enqueue()`` was given)."""
    try:
        found = import_string(call.task_path)
    except ImportError as error:
        raise UnresolvableTarget(
            f"cannot import task {call.task_path!r} of job {details.summary.id}: {error} "
            "(renaming or moving a task while it is queued is a breaking deploy)"
        ) from error
    if not isinstance(found, Task):
        raise UnresolvableTarget(
            f"{call.task_path} (job {details.summary.id}) is not a task; decorate it with @task"
        )
    changes: dict[str, Any] = {
        "priority": details.summary.priority,
        "queue_name": details.summary.queue,
        "run_after": datetime.fromisoformat(call.run_after) if call.run_after else None,
        "backend": call.backend,
    }
    if isinstance(found, MillraceTask):
        changes.update(
            declared_changes(call.options or {}),
            timeout=details.timeout,
            idempotency_key=details.idempotency_key,
        )
    return _rebuild(found, changes)


def _rebuild(task: Task[Any, Any], changes: dict[str, Any]) -> Task[Any, Any]:
    """``task`` with ``changes``; unvalidated if today's settings would refuse it (a
    queue removed since the job was stored must not hide its result)."""
    try:
        return replace(task, **changes)
    except InvalidTask:
        copy = object.__new__(type(task))
        for field in fields(task):
            object.__setattr__(copy, field.name, changes.get(field.name, getattr(task, field.name)))
        return copy


def _result(task: Task[Any, Any], details: JobDetails, call: _StoredCall) -> TaskResult[Any, Any]:
    summary = details.summary
    log = attempts.read_log(details.logs)
    finished_at = summary.finished_at if summary.state in TERMINAL_JOB_STATES else None
    result: TaskResult[Any, Any] = TaskResult(
        task=task,
        id=str(summary.id),
        status=attempts.STATUSES[summary.state],
        enqueued_at=_local(summary.created_at),
        started_at=_local(log.starts[0].at) if log.starts else None,
        last_attempted_at=_local(log.starts[-1].at) if log.starts else None,
        finished_at=_local(finished_at) if finished_at is not None else None,
        args=call.args,
        kwargs=call.kwargs,
        backend=call.backend,
        errors=attempts.task_errors(
            summary.state, details.attempts, details.last_error, log.raised
        ),
        worker_ids=[start.worker_id for start in log.starts],
    )
    if summary.state is JobState.SUCCEEDED:
        object.__setattr__(result, "_return_value", details.result)
    return result


def _check_arguments(task: Task[Any, Any], args: list[Any], kwargs: dict[str, Any]) -> None:
    """Refuse a call that does not fit the function at enqueue, not on the worker."""
    signature = inspect.signature(task.func)
    parameters = list(signature.parameters.values())
    if task.takes_context:
        parameters = parameters[1:]
    try:
        signature.replace(parameters=parameters).bind(*args, **kwargs)
    except TypeError as error:
        raise InvalidJobArguments(f"cannot enqueue {task.module_path}: {error}") from None


def _storable(value: Any) -> Any:
    """The return value as Django normalizes it, refused unless JSON keeps it unchanged
    (the job's result is stored as JSON)."""
    value = normalize_json(value)
    problem = json_problem(value)
    if problem is not None:
        raise TypeError(f"the task returned a value that cannot be stored: it {problem}")
    return value


def _due_at(run_after: datetime | None, client: JobClient) -> datetime | None:
    """When a deferred task becomes due; ``None`` when it is due now."""
    if run_after is None:
        return None
    aware = run_after if timezone.is_aware(run_after) else timezone.make_aware(run_after)
    if aware <= client.clock.now():
        return None
    return aware.astimezone(UTC)


def _local(instant: datetime) -> datetime:
    """Storage times are aware UTC; with ``USE_TZ = False`` Django expects naive ones."""
    return instant if settings.USE_TZ else timezone.make_naive(instant)


def _monitoring(storage: JobStorage) -> MonitoringStorage:
    if not isinstance(storage, MonitoringStorage):
        raise ImproperlyConfigured(
            f"{type(storage).__name__} has no monitoring read model, so task results "
            "cannot be read; use the 'orm' or 'memory' storage"
        )
    return storage


def _after_commit(storage: JobStorage, send: Callable[[], object]) -> None:
    """Run ``send`` once the enqueue is committed: after the caller's transaction when
    the storage writes through Django's connection to that database, else now."""
    orm = sys.modules.get("millrace_django.storage.orm")
    if orm is not None and isinstance(storage, orm.DjangoStorage):
        transaction.on_commit(send, using=storage.alias)
    else:
        send()
