"""The system checks of a ``TASKS`` alias served by Millrace (``MillraceBackend.check``).

Django runs every configured backend's ``check()`` from ``manage.py check`` (and before
``runserver``, ``migrate`` and the Millrace commands).
"""

from __future__ import annotations

from django.apps import apps
from django.core.checks import CheckMessage, Error, Warning
from django.tasks.backends.base import BaseTaskBackend

from millrace_django.conf import InvalidSettings, get_settings
from millrace_django.tasks_backend.options import options_problems


def backend_problems(backend: BaseTaskBackend) -> list[CheckMessage]:
    """What keeps ``backend``'s tasks from being stored, run or read back."""
    where = f"TASKS[{backend.alias!r}]"
    problems: list[CheckMessage] = [
        Error(
            problem,
            hint="OPTIONS takes RETRY, e.g. {'RETRY': Retry.none()}; see docs/django-tasks.md.",
            obj=where,
            id="millrace.E103",
        )
        for problem in options_problems(backend.options)
    ]
    if not apps.is_installed("millrace_django"):
        problems.append(
            Error(
                "MillraceBackend is configured, but 'millrace_django' is not in INSTALLED_APPS.",
                hint="Add 'millrace_django' to INSTALLED_APPS: it stores the tasks, and its "
                "workers (manage.py millrace_worker) run them.",
                obj=where,
                id="millrace.E101",
            )
        )
        return problems
    try:
        settings = get_settings()
    except InvalidSettings:
        return problems  # the MILLRACE checks report each problem
    if settings.storage == "memory":
        problems.append(
            Warning(
                "MILLRACE['STORAGE'] is 'memory', so tasks and their results live "
                "in one process: a worker elsewhere never runs them, and get_result() in "
                "another process finds nothing.",
                hint="Use MILLRACE['STORAGE'] = 'orm' (the default) outside tests.",
                obj=where,
                id="millrace.W101",
            )
        )
    unserved = sorted(backend.queues - settings.queues)
    if unserved:
        problems.append(
            Error(
                f"QUEUES names {', '.join(map(repr, unserved))}, which no Millrace "
                "worker serves; enqueueing there is refused.",
                hint=f"Add {', '.join(map(repr, unserved))} to MILLRACE['QUEUES'] "
                f"(now {sorted(settings.queues)!r}), or remove them from {where}['QUEUES'].",
                obj=where,
                id="millrace.E102",
            )
        )
    return problems
