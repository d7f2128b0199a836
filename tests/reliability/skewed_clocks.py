"""Clocks of machines whose time service is broken, for ``MILLRACE['CLOCK']`` in tests.

A process configured with one of these reads the system clock shifted by a fixed skew,
as a node without NTP would; everything else in it is production code.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta


class SkewedClock:
    """The system clock, ``skew`` off."""

    def __init__(self, skew: timedelta) -> None:
        self.skew = skew

    def now(self) -> datetime:
        return datetime.now(UTC) + self.skew


def an_hour_ahead() -> SkewedClock:
    return SkewedClock(timedelta(hours=1))


def an_hour_behind() -> SkewedClock:
    return SkewedClock(timedelta(hours=-1))
