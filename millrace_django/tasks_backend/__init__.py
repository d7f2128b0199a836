"""Millrace as the backend of Django's Tasks framework (``django.tasks``)::

    TASKS = {"default": {"BACKEND": "millrace_django.tasks_backend.MillraceBackend"}}

A mapper between ``django.tasks`` and the engine, one job per module:

- :mod:`.backend`: :class:`MillraceBackend`, the class Django calls;
- :mod:`.options`: :class:`MillraceTask` (Millrace's per-task options) and the alias's
  ``OPTIONS``; :mod:`.declared`: the options the job keeps only resolved;
- :mod:`.enqueue`: a ``task.enqueue()`` as a job of the task runner;
- :mod:`.stored_call`: the task call as that job's arguments keep it;
- :mod:`.runner`: :func:`run_task`, the job every task is, run by ordinary workers;
- :mod:`.attempts`: the runner's record of each attempt (start, worker, raised class);
- :mod:`.result` and :mod:`.task_errors`: a ``TaskResult`` read back from the job;
- :mod:`.checks`: the alias's system checks.

The task id is the job's UUID as a string, so the dashboard shows the same id. See
``docs/django-tasks.md``.
"""

from millrace_django.tasks_backend.backend import MillraceBackend
from millrace_django.tasks_backend.options import MillraceTask
from millrace_django.tasks_backend.runner import RUN_TASK_TARGET, run_task

__all__ = ["RUN_TASK_TARGET", "MillraceBackend", "MillraceTask", "run_task"]
