"""Calibrating this node's clock to the database's, so skewed nodes never steal leases.

Leases and due times are compared on each node's own clock. A node whose clock runs an
hour ahead would read every live lease as expired and run those jobs a second time; one
running behind would write leases that others read as expired at once. So each worker
and scheduler measures how far the database's clock is from its own, NTP-style, and sets
the offset of its :class:`~millrace_django.clock.CorrectedClock`: every node then
compares in the database's time. The storage still takes time only from that clock; the
database's clock is only ever read here, to measure the offset.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from millrace_django.clock import Clock, CorrectedClock, DatabaseTime

logger = logging.getLogger(__name__)

DEFAULT_SAMPLES = 5
"""Round trips per measurement; the quickest one is kept."""

DEFAULT_INTERVAL = timedelta(minutes=1)
"""How often the offset is measured again (clocks drift; administrators step them)."""

RETRY_AFTER_FAILURE = timedelta(seconds=5)
"""How soon a measurement that failed (the database unreachable) is tried again."""

STEP = timedelta(seconds=1)
"""How far this node's clock may move against the monotonic clock between measurements
before it counts as stepped (set by hand, or by a time service) and is measured again at
once. A time service that slews drifts it by milliseconds a minute."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ClockOffset:
    """One measurement of the database's clock against this node's."""

    offset: timedelta
    """What to add to this node's clock to read the database's."""
    round_trip: timedelta
    """Of the sample kept; the offset is exact to within half of it."""
    measured_at: datetime
    """The database's time when it was read."""


def measure_offset(clock: Clock, database: DatabaseTime, samples: int) -> ClockOffset | None:
    """NTP's estimate from ``samples`` reads of the database's clock: keep the read with
    the shortest round trip (the least room for a delay on one leg only) and assume the
    database read its clock half-way through it. ``None`` when the database runs on this
    machine's clock. A read that fails raises."""
    if samples < 1:
        raise ValueError(f"samples must be at least 1; got {samples}")
    best: ClockOffset | None = None
    for _ in range(samples):
        sent = clock.now()
        server = database.database_time()
        received = clock.now()
        if server is None:
            return None
        round_trip = received - sent
        if round_trip < timedelta(0):
            continue  # the clock stepped back during the read: the sample means nothing
        if best is None or round_trip < best.round_trip:
            best = ClockOffset(
                offset=server - (sent + round_trip / 2), round_trip=round_trip, measured_at=server
            )
    if best is None:
        raise RuntimeError("the clock stepped back during every sample; measure again")
    return best


class ClockSync:
    """Keeps ``clock`` calibrated to ``database``'s clock; shared by a process's worker
    and scheduler threads (one measures while the other carries on).

    ``warn_beyond``: an offset larger than this is logged as a warning at each
    measurement (it is corrected all the same, but means a machine's time service is
    broken). ``monotonic`` paces the measurements and tells when this node's clock
    stepped since the last one, which makes a measurement due at once (a test passes
    its own).
    """

    def __init__(
        self,
        clock: CorrectedClock,
        database: DatabaseTime,
        *,
        warn_beyond: timedelta,
        interval: timedelta = DEFAULT_INTERVAL,
        samples: int = DEFAULT_SAMPLES,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if interval <= timedelta(0):
            raise ValueError(f"interval must be positive; got {interval}")
        if samples < 1:
            raise ValueError(f"samples must be at least 1; got {samples}")
        self.clock = clock
        self._database = database
        self._warn_beyond = warn_beyond
        self._interval = interval.total_seconds()
        self._retry = min(interval, RETRY_AFTER_FAILURE).total_seconds()
        self._samples = samples
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._next: float | None = None  # None: measure at the first chance
        self._latest: ClockOffset | None = None
        self._anchor: tuple[float, datetime] | None = None  # (monotonic, source) when measured
        self._shared = False

    @property
    def latest(self) -> ClockOffset | None:
        """The offset in force: the last successful measurement (``None`` before the
        first one, and when the database runs on this machine's clock)."""
        return self._latest

    @property
    def shared_clock(self) -> bool:
        """Whether the database turned out to run on this machine's clock (nothing to
        correct, nothing more to measure)."""
        return self._shared

    def due(self) -> bool:
        """Whether :meth:`sync_if_due` would measure now: the last measurement is
        ``interval`` old (a failed one, a few seconds), or this node's clock stepped."""
        if self._shared:
            return False
        return self._next is None or self._monotonic() >= self._next or self._stepped()

    def _stepped(self) -> bool:
        anchor = self._anchor
        if anchor is None:
            return False
        monotonic, source = anchor
        elapsed = timedelta(seconds=self._monotonic() - monotonic)
        return abs(self.clock.source.now() - source - elapsed) > STEP

    def sync(self) -> ClockOffset | None:
        """Measure now and correct the clock; the new offset (``None`` if the database
        runs on this machine's clock). A failed read raises, leaving the offset as it was."""
        with self._lock:
            return self._sync()

    def sync_if_due(self) -> None:
        """Measure if :meth:`due`; a failure is logged. For loops: returns at once if
        another thread is measuring."""
        if not self.due() or not self._lock.acquire(blocking=False):
            return
        try:
            if self.due():
                self._sync()
        except Exception:
            logger.warning(
                "cannot measure this node's clock offset to the database; keeping %s",
                _signed(self.clock.offset),
                exc_info=True,
            )
        finally:
            self._lock.release()

    def _sync(self) -> ClockOffset | None:
        self._next = self._monotonic() + self._retry  # until the measurement succeeds
        measured = measure_offset(self.clock.source, self._database, self._samples)
        if measured is None:
            self._shared = True
            logger.debug("the database runs on this machine's clock; no offset to correct")
            return None
        self.clock.set_offset(measured.offset)
        first = self._latest is None
        self._latest = measured
        self._anchor = (self._monotonic(), self.clock.source.now())
        self._next = self._anchor[0] + self._interval
        self._report(measured, first)
        return measured

    def _report(self, measured: ClockOffset, first: bool) -> None:
        offset, round_trip = measured.offset, measured.round_trip
        if abs(offset) > self._warn_beyond:
            logger.warning(
                "this node's clock is %s %s the database's (measured to within %s); "
                "correcting for it, but check the time service (NTP) of this machine and "
                "of the database server",
                _magnitude(offset),
                "behind" if offset > timedelta(0) else "ahead of",
                _magnitude(round_trip / 2),
            )
        else:
            logger.log(
                logging.INFO if first else logging.DEBUG,
                "clock offset to the database: %s (measured to within %s)",
                _signed(offset),
                _magnitude(round_trip / 2),
            )


def _signed(delta: timedelta) -> str:
    seconds = delta.total_seconds()
    return f"{seconds * 1000:+.3f} ms" if abs(seconds) < 1 else f"{seconds:+.3f} s"


def _magnitude(delta: timedelta) -> str:
    return _signed(abs(delta)).lstrip("+")
