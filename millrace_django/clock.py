"""The one clock: every lease, due time and schedule comparison asks it for "now".

Storage and engine never call ``datetime.now()`` themselves, so tests can travel in time
with a :class:`FakeClock` instead of sleeping. Nodes whose clocks disagree would read
each other's leases as expired too early (or too late); a :class:`CorrectedClock` adds
the measured offset to the database's clock (read through :class:`DatabaseTime`), so
every node compares in the database's time.
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


class CorrectedClock:
    """``source`` plus an offset that a calibration updates; thread-safe without a lock
    (the offset is an immutable value, replaced and read as one reference).

    The offset is what to add to ``source`` to read the database's time (see
    :class:`~millrace_django.runtime.ClockSync`). It starts at zero.
    """

    def __init__(self, source: Clock, offset: timedelta = timedelta(0)) -> None:
        self.source = source
        self._offset = offset

    def now(self) -> datetime:
        return self.source.now() + self._offset

    @property
    def offset(self) -> timedelta:
        return self._offset

    def set_offset(self, offset: timedelta) -> None:
        self._offset = offset


@runtime_checkable
class DatabaseTime(Protocol):
    """A storage that can read its database's clock, so nodes can calibrate to it.

    Optional, and never used in a comparison: the storage still takes "now" from its
    injected clock only.
    """

    def database_time(self) -> datetime | None:
        """The database's current time (aware UTC), read with one round trip; ``None``
        when the database runs on this machine's clock (SQLite, memory)."""
        ...


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
