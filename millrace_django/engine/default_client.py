"""The process-wide default client, typed, for the rooms above the engine's client.

The Django app installs one when it is ready; tests install their own and put the
previous one back. It lives in :mod:`~millrace_django.engine.client_slot`, which the
decorator reads from below the client.
"""

from __future__ import annotations

from millrace_django.engine import client_slot
from millrace_django.engine.client import JobClient
from millrace_django.engine.errors import NotConfigured


def set_default_client(client: JobClient | None) -> JobClient | None:
    """Install ``client`` (or none) as the default; returns the one it replaces."""
    previous = client_slot.install(client)
    return previous if isinstance(previous, JobClient) else None


def default_client() -> JobClient:
    """The client ``fn.enqueue()`` and friends use; raises if none was installed."""
    client = client_slot.installed()
    if not isinstance(client, JobClient):
        raise NotConfigured(f"the installed default client is not a JobClient: {client!r}")
    return client
