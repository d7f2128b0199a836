"""The process-wide default client, typed, for the rooms above the engine's client.

The Django app installs one when it is ready; tests install their own and put the
previous one back. It lives in :mod:`~millrace_django.engine.client_slot`, which the
decorator reads from below the client.
"""

from __future__ import annotations

from typing import cast

from millrace_django.engine import client_slot
from millrace_django.engine.client import JobClient


def set_default_client(client: JobClient | None) -> JobClient | None:
    """Install ``client`` (or none) as the default; returns the one it replaces."""
    # The slot holds what this function put there: a JobClient or nothing.
    return cast("JobClient | None", client_slot.install(client))


def default_client() -> JobClient:
    """The client ``fn.enqueue()`` and friends use; raises if none was installed."""
    return cast("JobClient", client_slot.installed())
