"""The process-wide slot that holds the default client behind ``fn.enqueue()``.

Decorators run at import time, long before settings are read, so a decorated function
cannot hold a client of its own: it finds the one the Django app installed here. The
slot sits below the client and knows it only as :class:`InstalledClient`, the little the
decorator and the batch and workflow watchers ask of it, so the engine's rooms import
one way (:mod:`~millrace_django.engine.default_client` gives the rest of the house the
typed :class:`~millrace_django.engine.client.JobClient`).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Protocol

from millrace_django.engine.errors import NotConfigured

if TYPE_CHECKING:
    from uuid import UUID

    from millrace_django.contract import JobStorage


class InstalledClient(Protocol):
    """What the engine below the client needs of the default one."""

    @property
    def storage(self) -> JobStorage: ...

    def enqueue(self, job: Any, /, *args: Any, **kwargs: Any) -> UUID: ...

    def schedule(self, job: Any, /, *args: Any, **kwargs: Any) -> UUID: ...


_lock = threading.Lock()
_client: InstalledClient | None = None


def install(client: InstalledClient | None) -> InstalledClient | None:
    """Put ``client`` (or none) in the slot; returns the one it replaces."""
    global _client
    with _lock:
        previous, _client = _client, client
    return previous


def installed() -> InstalledClient:
    """The installed client; raises :class:`NotConfigured` if there is none."""
    client = _client
    if client is None:
        raise NotConfigured(
            "no Millrace job client is configured: add 'millrace_django' to INSTALLED_APPS "
            "(it installs one at startup), or call "
            "millrace_django.engine.set_default_client() in a script or test"
        )
    return client
