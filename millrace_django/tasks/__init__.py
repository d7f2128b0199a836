"""Helpers of :mod:`millrace_django.tasks_backend`, Millrace's backend for ``django.tasks``.

Nothing here is public API: configure ``millrace_django.tasks_backend.MillraceBackend``
in ``TASKS`` (see ``docs/django-tasks.md``).
"""
