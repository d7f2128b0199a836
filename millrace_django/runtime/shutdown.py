"""Stopping on request: counted requests, and the signals that make them.

The first request is graceful (stop claiming, let in-flight jobs finish, then cancel
and release the rest); the second is urgent (release at once). Signal handlers take no
lock: Python runs them on the main thread between two bytecodes, possibly while that
thread holds the very lock a stop request needs, so a handler only posts the signal to
a queue that is safe to put into from a handler, and a thread of its own asks to stop.
"""

from __future__ import annotations

import queue
import signal
import threading
from collections.abc import Callable, Iterable
from types import FrameType

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
RELAY_JOIN_SECONDS = 5.0


class StopRequests:
    """How many times a stop was asked for (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._count = 0

    def request(self) -> int:
        """Count one more request; returns the new count."""
        with self._lock:
            self._count += 1
            return self._count

    @property
    def requested(self) -> bool:
        return self.count >= 1

    @property
    def urgent(self) -> bool:
        """A second request arrived: skip the drain and the grace."""
        return self.count >= 2

    @property
    def count(self) -> int:
        with self._lock:
            return self._count


def handle_stop_signals(
    request_stop: Callable[[], None], signals: Iterable[signal.Signals] = STOP_SIGNALS
) -> Callable[[], None]:
    """Call ``request_stop`` on each of ``signals`` (SIGTERM and SIGINT by default), so
    a second signal escalates. Returns a function that restores the previous handlers.
    Must be called from the main thread (Python delivers signals there)."""
    received: queue.SimpleQueue[int | None] = queue.SimpleQueue()

    def handler(signum: int, frame: FrameType | None) -> None:
        received.put_nowait(signum)  # reentrant: safe whatever the main thread holds

    def relay() -> None:
        while received.get() is not None:
            request_stop()

    relaying = threading.Thread(target=relay, name="millrace-stop-signals", daemon=True)
    relaying.start()
    previous = {number: signal.signal(number, handler) for number in signals}

    def restore() -> None:
        for number, old in previous.items():
            signal.signal(number, old)
        received.put_nowait(None)
        relaying.join(RELAY_JOIN_SECONDS)

    return restore
