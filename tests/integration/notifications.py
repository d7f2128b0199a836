"""What the wake-up tests share: a storage on an alias with empty tables, bounded waits,
and threads that run a storage call on a connection of their own."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from django.db import connections

from millrace_django.clock import FakeClock
from tests.conformance.django_harness import DjangoHarness, DjangoStoreUnderTest

HINT_SECONDS = 10.0
"""How long a test waits for a hint that must come (a wait returns as soon as it does)."""
QUIET_SECONDS = 0.3
"""How long a test listens for a hint that must not come."""


@contextmanager
def store_on(alias: str, clock: FakeClock) -> Iterator[DjangoStoreUnderTest]:
    """A storage on ``alias`` with empty millrace tables (emptied again after)."""
    with DjangoHarness(alias).open(clock) as store:
        yield store


def in_thread(alias: str, work: Callable[[], Any]) -> Any:
    """Run ``work`` in a thread of its own (so on a database connection of its own) and
    return its result, or raise what it raised."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["result"] = work()
        except BaseException as error:
            outcome["error"] = error
        finally:
            connections[alias].close()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(HINT_SECONDS)
    assert not thread.is_alive(), "the storage call did not finish"
    if "error" in outcome:
        raise outcome["error"]
    return outcome.get("result")
