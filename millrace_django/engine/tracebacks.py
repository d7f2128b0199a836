"""The traceback a failed job keeps: Python's own text, from the job's own call on.

An exception a job raises travels up through the code that called it: the worker's
execution path, the executor, the workflow engine for a workflow's step, and for a
``django.tasks`` task the task runner, ``Task.call`` and, for async functions, asgiref
and asyncio. Those frames say nothing
about the failure and push the job's own frames down the page, so they are left out:
the text starts at the first frame outside them. The worker's log keeps the whole
traceback.
"""

from __future__ import annotations

from traceback import TracebackException
from types import TracebackType

CALLER_MODULES = (
    "millrace_django.runtime",
    "millrace_django.engine.executor",
    "millrace_django.engine.workflow",
    "millrace_django.tasks_backend",
    "django.tasks",
    "asgiref",
    "asyncio",
    "concurrent.futures",
)
"""Modules (and their submodules) through which a job's function is called."""


def job_traceback(error: BaseException) -> str:
    """``error`` formatted as Python prints it (trailing newline included), its
    traceback starting at the first frame that is not in :data:`CALLER_MODULES`.

    Where the call path itself raised, only its innermost frame is kept. The result is
    the same wherever ``error`` is caught along the call path, so the task runner's
    ``TaskError`` and the job's stored error agree.
    """
    start = _first_own_frame(error.__traceback__)
    return "".join(TracebackException(type(error), error, start).format())


def _first_own_frame(frames: TracebackType | None) -> TracebackType | None:
    current = frames
    while current is not None and current.tb_next is not None and _is_caller(current):
        current = current.tb_next
    return current


def _is_caller(frame: TracebackType) -> bool:
    module = frame.tb_frame.f_globals.get("__name__", "")
    return any(module == name or module.startswith(f"{name}.") for name in CALLER_MODULES)
