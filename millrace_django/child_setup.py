"""Django in a hard-timeout job's child process (see :mod:`millrace_django.runtime.isolation`).

The child is a fresh interpreter: it sets Django up from the same settings module as the
worker, then points each database alias at the database the worker uses, since a test
run renames them at run time (pytest-django's ``test_...`` databases) and the settings
module does not know. It opens its own connections; an in-memory SQLite database is not
shared with it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import django
from django.conf import settings
from django.db import connections


@dataclass(frozen=True, slots=True)
class DjangoChild:
    """Picklable setup for one child: the worker's settings module and database names."""

    settings_module: str | None
    database_names: tuple[tuple[str, str], ...]

    def __call__(self) -> None:
        if self.settings_module is not None:
            os.environ["DJANGO_SETTINGS_MODULE"] = self.settings_module
        django.setup()
        for alias, name in self.database_names:
            if alias in settings.DATABASES:
                connections[alias].settings_dict["NAME"] = name


def django_child() -> DjangoChild:
    """The setup of a child started now, from this (the worker's) process."""
    return DjangoChild(
        settings_module=os.environ.get("DJANGO_SETTINGS_MODULE"),
        database_names=tuple(
            (alias, str(connections[alias].settings_dict["NAME"])) for alias in settings.DATABASES
        ),
    )
