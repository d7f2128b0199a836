"""When to claim again: adaptive polling, shortened by the provider's wake-up hints.

An empty claim waits for a hint or the poll delay, whichever comes first; the delay
doubles from ``poll_min`` to ``poll_max`` while claims keep coming back empty and resets
as soon as one returns jobs. Hints are only hints: a dropped one costs at most
``poll_max`` of latency, a spurious one an extra claim.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Collection
from datetime import timedelta

from millrace_django.contract import Capabilities, JobStorage, Notifier, WakeupSubscription

logger = logging.getLogger(__name__)

LISTEN_SLICE = 0.25
"""Seconds the notifier pump blocks per wait, so it notices closing promptly."""

CLOSE_SECONDS = 4 * LISTEN_SLICE
"""How long :meth:`Wakeup.close` waits for the pump to close its subscription."""


class Backoff:
    """The adaptive poll delay."""

    def __init__(self, floor: timedelta, ceiling: timedelta) -> None:
        self._floor = floor.total_seconds()
        self._ceiling = ceiling.total_seconds()
        self._delay = self._floor

    def reset(self) -> None:
        self._delay = self._floor

    def next(self) -> float:
        """The delay to wait now, in seconds; the one after it doubles, up to the ceiling."""
        delay = self._delay
        self._delay = min(delay * 2, self._ceiling)
        return delay


class Wakeup:
    """Where the claim loop waits for a reason to claim again.

    Cleared just *before* each claim, so a hint (or a stop request) arriving during the
    claim's round trip is still pending afterwards and the next wait returns at once.
    If the storage offers notifications, a pump thread turns its hints into wake-ups;
    if the notifier fails, the worker falls back to polling alone.
    """

    def __init__(self, storage: JobStorage, queues: Collection[str], name: str) -> None:
        self._event = threading.Event()
        self._closed = threading.Event()
        self._subscription: WakeupSubscription | None = None
        self._pump: threading.Thread | None = None
        if Capabilities.NOTIFICATIONS in storage.capabilities and isinstance(storage, Notifier):
            self._notifier: Notifier | None = storage
            self._queues = frozenset(queues)
            self._pump = threading.Thread(target=self._listen, name=name, daemon=True)
        else:
            self._notifier = None

    @property
    def listening(self) -> bool:
        """Whether hints are being received (started, and the notifier works)."""
        return self._pump is not None and self._pump.is_alive()

    def start(self) -> None:
        """Subscribe (before the first claim, so no hint is missed) and start the pump."""
        if self._notifier is None or self._pump is None:
            return
        try:
            self._subscription = self._notifier.listen(self._queues)
        except Exception:
            logger.warning("cannot listen for wake-ups; polling only", exc_info=True)
            return
        self._pump.start()

    def clear(self) -> None:
        self._event.clear()

    def set(self) -> None:
        self._event.set()

    def wait(self, timeout: float) -> bool:
        """Block until woken or ``timeout`` seconds pass; whether woken."""
        return self._event.wait(timeout)

    def close(self) -> None:
        """Stop listening, and wait (briefly) for the pump to close the subscription:
        its connection is a database session, which must not outlive the worker (a
        worker run inside a longer process, such as a test suite, would leave one
        behind each time)."""
        self._closed.set()
        self._event.set()
        if self._pump is not None and self._pump.is_alive():
            self._pump.join(CLOSE_SECONDS)

    def _listen(self) -> None:
        subscription = self._subscription
        assert subscription is not None
        try:
            while not self._closed.is_set():
                if subscription.wait(LISTEN_SLICE):
                    self._event.set()
                    # Offer the interpreter to the woken claim loop before this thread
                    # goes back to waiting: the claim is what the hint is for.
                    time.sleep(0)
        except Exception:
            logger.warning("the wake-up notifier stopped; polling only", exc_info=True)
        finally:
            subscription.close()
