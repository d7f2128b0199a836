"""The one clock: every lease, due time and schedule comparison asks it for "now".

Storage and engine never call ``datetime.now()`` themselves, so tests can travel in time
with a :class:`FakeClock` instead of sleeping.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Protocol, runtime_checkable


@runtime_checkable
class Clock(Protocol):
    """Source of the current instant, always timezone-aware UTC."""

    def now(self) -> datetime: ...


class SystemClock:
    """The wall clock, for production."""

    def now(self) -> datetime:
        return datetime.now(UTC)


class FakeClock:
    """A clock that only moves when a test moves it; thread-safe."""

    DEFAULT_START = datetime(2026, 1, 1, tzinfo=UTC)

    def __init__(self, start: datetime = DEFAULT_START) -> None:
        self._now = _require_aware(start)
        self._lock = threading.Lock()

    def now(self) -> datetime:
        with self._lock:
            return self._now

    def advance(self, delta: timedelta) -> datetime:
        """Move forward by ``delta`` (never backwards) and return the new instant."""
        if delta < timedelta(0):
            raise ValueError("a FakeClock only moves forward; got a negative delta")
        with self._lock:
            self._now += delta
            return self._now

    def set(self, instant: datetime) -> None:
        """Jump to ``instant``, which must not be earlier than the current time."""
        instant = _require_aware(instant)
        with self._lock:
            if instant < self._now:
                raise ValueError("a FakeClock only moves forward")
            self._now = instant


def _require_aware(instant: datetime) -> datetime:
    if instant.tzinfo is None or instant.utcoffset() is None:
        raise ValueError("clock instants must be timezone-aware")
    return instant.astimezone(UTC)
