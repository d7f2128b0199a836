"""The backend Django's Tasks framework calls: ``enqueue`` stores a task as a Millrace
job, ``get_result`` reads it back as a ``TaskResult``."""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any
from uuid import UUID

from django.core.checks import CheckMessage
from django.db import transaction
from django.tasks import Task, TaskResult
from django.tasks.backends.base import BaseTaskBackend
from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
from django.tasks.signals import task_enqueued

from millrace_django.contract import JobDetails, JobStorage
from millrace_django.engine import default_client
from millrace_django.tasks_backend.attempts import TaskAttempts
from millrace_django.tasks_backend.checks import backend_problems
from millrace_django.tasks_backend.enqueue import task_job
from millrace_django.tasks_backend.options import MillraceTask, option_problem
from millrace_django.tasks_backend.result import enqueued_result, job_details, task_result
from millrace_django.tasks_backend.runner import RUN_TASK_TARGET
from millrace_django.tasks_backend.stored_call import StoredCall, stored_task


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
        built = task_job(
            task, args, kwargs, alias=self.alias, alias_options=self.options, client=client
        )
        record = built.record
        (stored_id,) = client.store([record])
        if stored_id != record.id:
            return self._holder_of_key(stored_id, record.idempotency_key)
        result = enqueued_result(task, record.id, record.created_at, built.call)
        _after_commit(client.storage, lambda: task_enqueued.send(type(self), task_result=result))
        return result

    def get_result(self, result_id: str) -> TaskResult[Any, Any]:
        try:
            job_id = UUID(str(result_id))
        except ValueError:
            raise TaskResultDoesNotExist(result_id) from None
        details = job_details(default_client().storage, job_id)
        call = _task_call(details) if details is not None else None
        if details is None or call is None or call.backend != self.alias:
            raise TaskResultDoesNotExist(result_id)
        attempts = TaskAttempts.from_checkpoint(details.checkpoint)
        return task_result(stored_task(call, details), details, call, attempts)

    def check(self, **kwargs: Any) -> list[CheckMessage]:
        return backend_problems(self)

    def _holder_of_key(self, job_id: UUID, key: str | None) -> TaskResult[Any, Any]:
        """The result of the active job already holding the idempotency key."""
        try:
            return self.get_result(str(job_id))
        except TaskResultDoesNotExist:
            raise InvalidTask(
                f"idempotency key {key!r} is held by job {job_id}, which is not a task of "
                f"backend {self.alias!r}"
            ) from None


def _task_call(details: JobDetails) -> StoredCall | None:
    """The task call stored in a job, or ``None`` if the job is not a task's."""
    invocation = details.invocation
    if invocation.target != RUN_TASK_TARGET or invocation.args:
        return None
    return StoredCall.from_job_kwargs(invocation.kwargs)


def _after_commit(storage: JobStorage, send: Callable[[], object]) -> None:
    """Run ``send`` once the enqueue is committed: after the caller's transaction when
    the storage writes through Django's connection to that database, else now."""
    orm = sys.modules.get("millrace_django.storage.orm")
    if orm is not None and isinstance(storage, orm.DjangoStorage):
        transaction.on_commit(send, using=storage.alias)
    else:
        send()
