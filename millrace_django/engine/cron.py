"""Five-field cron schedules in any IANA time zone, with an explicit DST policy.

Matching is croniter's (vixie dialect: lists, ranges, steps, month and weekday names,
0 or 7 for Sunday, and "either day field" when both are restricted). We walk the
occurrences in local wall-clock time and map each to an instant ourselves, because
that is where daylight saving needs a rule:

- a local time skipped by spring-forward fires once, at the first valid instant after
  it (the moment the clocks jump);
- a local time repeated by fall-back fires once, at its first occurrence.

Several skipped times map to the same instant and therefore fire only once.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from croniter import CroniterError, croniter  # type: ignore[import-untyped]

from millrace_django.engine.errors import InvalidCron, UnknownTimezone

HORIZON = timedelta(days=5 * 366)
"""How far ahead an occurrence is searched for; a cron that never fires within it is refused."""

_FIELDS = ("minute", "hour", "day of month", "month", "day of week")
_MONTHS = ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC")
_DAYS = ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")
_NAMES = {
    3: {month: number for number, month in enumerate(_MONTHS, 1)},
    4: {day: number for number, day in enumerate(_DAYS)},
}
_ITEM = re.compile(r"^(?:\*|(?P<low>\d+|[A-Za-z]{3})(?:-(?P<high>\d+|[A-Za-z]{3}))?)(?:/\d+)?$")
_PROBE_START = datetime(2000, 1, 1)
"""A fixed point to test that a cron can fire at all, without reading a clock."""


@dataclass(frozen=True, slots=True)
class CronSchedule:
    """A parsed cron expression bound to a time zone."""

    expression: str
    timezone: str = "UTC"
    _zone: ZoneInfo = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_zone", _zone(self.timezone))
        _check_syntax(self.expression)
        if self._next_local(_PROBE_START) is None:
            raise InvalidCron(
                f"cron {self.expression!r} has no occurrence within 5 years "
                "(is it a date that does not exist, such as 30 February?)"
            )

    @classmethod
    def parse(cls, expression: str, timezone: str = "UTC") -> CronSchedule:
        """Parse and validate; raises :class:`InvalidCron` or :class:`UnknownTimezone`."""
        if not isinstance(expression, str):
            raise InvalidCron(f"a cron expression must be a string; got {expression!r}")
        return cls(" ".join(expression.split()), timezone)

    def __str__(self) -> str:
        return self.expression

    def next_after(self, instant: datetime) -> datetime | None:
        """The first firing instant strictly after ``instant`` (aware, UTC), or ``None``
        if there is none within 5 years."""
        if instant.tzinfo is None or instant.utcoffset() is None:
            raise ValueError("next_after needs a timezone-aware datetime")
        local = instant.astimezone(self._zone).replace(tzinfo=None, fold=0)
        horizon = local + HORIZON if local < datetime.max - HORIZON else datetime.max
        cursor = local
        while True:
            following = self._next_local(cursor)
            if following is None or following > horizon:
                return None
            fire = self._instant_of(following)
            if fire > instant:
                return fire
            cursor = following

    def _next_local(self, after: datetime) -> datetime | None:
        """The next matching wall-clock minute after ``after`` (naive local time)."""
        try:
            matches = croniter(self.expression, after, max_years_between_matches=5)
            found: datetime = matches.get_next(datetime)
        except CroniterError:
            return None
        return found

    def _instant_of(self, local: datetime) -> datetime:
        """Map a wall-clock time to an instant under the DST policy."""
        probe = local
        while True:
            instant = probe.replace(tzinfo=self._zone, fold=0).astimezone(UTC)
            if instant.astimezone(self._zone).replace(tzinfo=None) == probe:
                return instant  # exists; fold=0 picks the first of a repeated time
            probe += timedelta(minutes=1)  # skipped: walk to the end of the gap


def _zone(name: str) -> ZoneInfo:
    if not isinstance(name, str) or not name.strip():
        raise UnknownTimezone(f"a time zone must be an IANA name such as 'UTC'; got {name!r}")
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as error:
        raise UnknownTimezone(
            f"unknown time zone {name!r}; use an IANA name such as 'Europe/Paris'"
        ) from error


def _check_syntax(expression: str) -> None:
    """Enforce the dialect croniter is more generous than: exactly five plain fields."""
    fields = expression.split()
    if len(fields) != len(_FIELDS):
        raise InvalidCron(
            f"cron {expression!r} must have 5 fields "
            f"(minute hour day-of-month month day-of-week); it has {len(fields)}"
        )
    for position, (name, text) in enumerate(zip(_FIELDS, fields, strict=True)):
        for item in text.split(","):
            match = _ITEM.match(item)
            if match is None:
                raise InvalidCron(f"cron {expression!r}: {name} field has bad item {item!r}")
            low, high = match["low"], match["high"]
            if high is not None and _number(low, position) > _number(high, position):
                raise InvalidCron(
                    f"cron {expression!r}: {name} range {item!r} is inverted "
                    "(ranges do not wrap around)"
                )
    try:
        croniter(expression, _PROBE_START)
    except CroniterError as error:
        raise InvalidCron(f"cron {expression!r} is invalid: {error}") from error


def _number(token: str, position: int) -> int:
    if token.isdigit():
        return int(token)
    names = _NAMES.get(position, {})
    if token.upper() not in names:
        raise InvalidCron(f"{token!r} is not a name allowed in the {_FIELDS[position]} field")
    return names[token.upper()]
