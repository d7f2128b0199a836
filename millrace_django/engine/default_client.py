"""The process-wide default client behind ``fn.enqueue()``.

Decorators run at import time, long before settings are read, so a decorated function
cannot hold a client of its own. The Django app wires one here when it is ready; tests
install their own and put the previous one back.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from millrace_django.engine.errors import NotConfigured

if TYPE_CHECKING:
    from millrace_django.engine.client import JobClient

_lock = threading.Lock()
_client: JobClient | None = None


def set_default_client(client: JobClient | None) -> JobClient | None:
    """Install ``client`` (or none) as the default; returns the one it replaces."""
    global _client
    with _lock:
        previous, _client = _client, client
    return previous


def default_client() -> JobClient:
    """The client ``fn.enqueue()`` and friends use; raises if none was installed."""
    client = _client
    if client is None:
        raise NotConfigured(
            "no Millrace job client is configured: add 'millrace_django' to INSTALLED_APPS "
            "(it installs one at startup), or call "
            "millrace_django.engine.set_default_client() in a script or test"
        )
    return client
