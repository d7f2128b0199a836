"""Flow-control limits a job carries, and the one admission rule every provider applies.

A job may carry limits, each on a *scope* that jobs share: a queue (``queue:emails``),
a job function (``job:shop.jobs:export``) or one key of a function
(``job:shop.jobs:sync#42``). A limit caps the jobs of its scope ``processing`` at once
(``concurrency``), the starts of its scope in any window of one ``rate.period``
(``rate``), or both. A provider decides which limited jobs a claim may start with
:class:`Admission`, inside the claim's own atom, after serializing the claims of every
scope concerned: that is what makes a limit hold across every worker.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

_UNITS = {"s": timedelta(seconds=1), "m": timedelta(minutes=1), "h": timedelta(hours=1)}
_UNITS["d"] = timedelta(days=1)
_RATE = re.compile(r"^\s*(\d+)\s*/\s*(\d*)\s*([smhd])\s*$")
MAX_RATE_COUNT = 10_000
"""The most starts a rate may allow per period: a claim of a rate-limited scope reads and
writes the start times of one period (see :class:`Admission`)."""
MAX_RATE_PERIOD = timedelta(days=1)
"""The longest period of a rate: a scope without a start for that long has nothing to
remember, and storage may forget it (``JobStorage.forget_idle_limits``)."""


@dataclass(frozen=True, slots=True)
class Rate:
    """At most ``count`` starts in any window of length ``period``."""

    count: int
    period: timedelta

    def __post_init__(self) -> None:
        if type(self.count) is not int or not 1 <= self.count <= MAX_RATE_COUNT:
            raise ValueError(f"a rate allows 1 to {MAX_RATE_COUNT} starts; got {self.count!r}")
        if not isinstance(self.period, timedelta) or not (
            timedelta(0) < self.period <= MAX_RATE_PERIOD
        ):
            raise ValueError(f"a rate's period is positive, at most a day; got {self.period!r}")

    @classmethod
    def parse(cls, text: str | Rate) -> Rate:
        """``"10/s"``, ``"600/m"``, ``"100/h"``, ``"5/d"`` or ``"3/10s"`` (three starts
        in any ten seconds); a :class:`Rate` is returned as it is."""
        if isinstance(text, Rate):
            return text
        match = _RATE.match(text) if isinstance(text, str) else None
        if match is None:
            raise ValueError(
                f"a rate reads like '10/s', '600/m', '100/h', '5/d' or '3/10s'; got {text!r}"
            )
        count, multiple, unit = match.groups()
        periods = int(multiple) if multiple else 1
        if not timedelta(0) < periods * _UNITS[unit] <= MAX_RATE_PERIOD:
            raise ValueError(f"a rate's period is positive, at most a day; got {text!r}")
        return cls(int(count), periods * _UNITS[unit])

    def __str__(self) -> str:
        for unit, length in _UNITS.items():
            periods, rest = divmod(self.period, length)
            if not rest and periods == 1:
                return f"{self.count}/{unit}"
        return f"{self.count}/{self.period.total_seconds():g}s"


@dataclass(frozen=True, slots=True, kw_only=True)
class Limit:
    """One limit on ``scope``: ``concurrency`` running at once, ``rate`` starts."""

    scope: str
    concurrency: int | None = None
    rate: Rate | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.scope, str) or not self.scope:
            raise ValueError(f"a limit needs a scope; got {self.scope!r}")
        if self.concurrency is not None and (
            type(self.concurrency) is not int or self.concurrency < 1
        ):
            raise ValueError(
                f"a concurrency limit is an integer of at least 1; got {self.concurrency!r}"
            )
        if self.concurrency is None and self.rate is None:
            raise ValueError(f"the limit on {self.scope!r} sets neither concurrency nor rate")


def queue_scope(queue: str) -> str:
    """The scope of every job of ``queue``."""
    return f"queue:{queue}"


def job_scope(target: str, key: str | None = None) -> str:
    """The scope of every job of ``target``, or of those with ``key`` only."""
    return f"job:{target}" if key is None else f"job:{target}#{key}"


def limits_json(limits: Sequence[Limit]) -> list[dict[str, object]] | None:
    """``limits`` as stored (``None`` for none): scope, concurrency, and the rate as a
    count and a period in microseconds."""
    if not limits:
        return None
    return [
        {
            "scope": limit.scope,
            "concurrency": limit.concurrency,
            "rate": None
            if limit.rate is None
            else [limit.rate.count, limit.rate.period // timedelta(microseconds=1)],
        }
        for limit in limits
    ]


def limits_of(stored: object) -> tuple[Limit, ...]:
    """The limits a job stores (see :func:`limits_json`)."""
    if not isinstance(stored, list):
        return ()
    return tuple(
        Limit(
            scope=item["scope"],
            concurrency=item["concurrency"],
            rate=None
            if item["rate"] is None
            else Rate(item["rate"][0], item["rate"][1] * timedelta(microseconds=1)),
        )
        for item in stored
    )


def running_by_scope(running: Iterable[Sequence[Limit]]) -> Counter[str]:
    """How many of the running jobs (given by their limits) hold each scope."""
    return Counter(limit.scope for limits in running for limit in limits)


def full_scopes(running: Sequence[Sequence[Limit]]) -> set[str]:
    """The scopes whose running jobs (given by their limits) fill their concurrency (the
    largest any of them carries): a claim may skip the waiting jobs of those unread."""
    counts = running_by_scope(running)
    allowed: dict[str, int] = {}
    for limits in running:
        for limit in limits:
            if limit.concurrency is not None:
                allowed[limit.scope] = max(allowed.get(limit.scope, 0), limit.concurrency)
    return {scope for scope, most in allowed.items() if counts[scope] >= most}


class Admission:
    """Which limited jobs one claim may start, decided in claim order.

    Built from what the claim read after serializing the claims of the scopes concerned:
    ``running``, the jobs of each scope now ``processing`` (an expired lease included: its
    worker may still be running it), and ``starts``, each scope's recorded start times.
    A job is admitted iff, for every limit it carries, fewer than ``concurrency`` jobs of
    the scope run (counting those admitted here) and fewer than ``rate.count`` started in
    the window ``(now - rate.period, now]`` (a start recorded later than ``now``, by a
    node whose clock is ahead, counts too). A job reclaimed from an expired lease already
    holds its slot: it needs rate only. Each admission is a start of its scopes at ``now``.
    """

    def __init__(
        self, running: Mapping[str, int], starts: Mapping[str, Sequence[datetime]], now: datetime
    ) -> None:
        self._running = Counter(running)
        self._starts = {scope: sorted(times) for scope, times in starts.items()}
        self._horizon: dict[str, timedelta] = {}
        self.now = now

    def admit(self, limits: Sequence[Limit], *, holds_slot: bool = False) -> bool:
        """Whether a job with ``limits`` may start now; if so, it counts as started."""
        for limit in limits:
            if (
                not holds_slot
                and limit.concurrency is not None
                and self._running[limit.scope] >= limit.concurrency
            ):
                return False
            if limit.rate is not None and self._in_window(limit) >= limit.rate.count:
                return False
        for limit in limits:
            if not holds_slot:
                self._running[limit.scope] += 1
            if limit.rate is not None:
                self._starts.setdefault(limit.scope, []).append(self.now)
                horizon = self._horizon.get(limit.scope, timedelta(0))
                self._horizon[limit.scope] = max(horizon, limit.rate.period)
        return True

    def _in_window(self, limit: Limit) -> int:
        assert limit.rate is not None
        since = self.now - limit.rate.period
        return sum(1 for at in self._starts.get(limit.scope, ()) if at > since)

    def recorded_starts(self) -> dict[str, list[datetime]]:
        """Per scope that started a rate-limited job here: the start times to keep (those
        within the longest period seen, oldest first); other scopes are unchanged."""
        return {
            scope: [at for at in self._starts[scope] if at > self.now - horizon]
            for scope, horizon in self._horizon.items()
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class LimitUsage:
    """One queue's or one function's limit, and its use now. A function keyed by an
    argument is one entry: its limit applies to each key, ``keys`` of which have jobs
    running or waiting."""

    scope: str
    concurrency: int | None
    rate: Rate | None
    running: int
    """Its jobs ``processing`` (an expired lease included)."""
    waiting: int
    """Its jobs ``enqueued``: held back while the limit has no room."""
    keys: int = 0


def usage_by_scope(
    running: Iterable[Sequence[Limit]], waiting: Iterable[tuple[Sequence[Limit], int]]
) -> list[LimitUsage]:
    """Per queue and function, in scope order: the limit its latest job carries (running
    first, then waiting), and how many of its jobs run and wait; ``waiting`` pairs the
    limits of waiting jobs with how many carry them."""
    limit: dict[str, Limit] = {}
    counts: dict[str, list[int]] = {}
    keys: dict[str, set[str]] = {}
    tallied = [(limits, 1, 0) for limits in running]
    tallied += [(limits, 0, n) for limits, n in waiting]
    for limits, runs, waits in tallied:
        for one in limits:
            scope, _, key = one.scope.partition("#")
            limit.setdefault(scope, one)
            counted = counts.setdefault(scope, [0, 0])
            counted[0] += runs
            counted[1] += waits
            if key:
                keys.setdefault(scope, set()).add(key)
    return [
        LimitUsage(
            scope=scope,
            concurrency=limit[scope].concurrency,
            rate=limit[scope].rate,
            running=counts[scope][0],
            waiting=counts[scope][1],
            keys=len(keys.get(scope, ())),
        )
        for scope in sorted(limit)
    ]
