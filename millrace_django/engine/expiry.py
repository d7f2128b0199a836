"""A job's deadline (``expires=``): checked where it is given, fixed when the job is built.

A deadline is a delay (seconds or a ``timedelta``), counted from when the job is due (now
for an enqueue, its due time for a schedule, its fire time for a recurring occurrence),
or an aware instant. No execution starts at or after it; the storage's sweep then ends
the job ``cancelled`` with the reason in its last error.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

from millrace_django.engine.errors import InvalidSchedule

type Expiry = timedelta | datetime
"""A checked ``expires=`` value (see :func:`expiry_of`)."""


def expiry_of(value: object, *, instant_allowed: bool = True) -> Expiry:
    """``value`` as a positive delay or an aware UTC instant; numbers are seconds.

    ``instant_allowed=False`` (a ``@job`` default, shared by every later enqueue) takes
    delays only. Anything else raises :class:`~millrace_django.engine.InvalidSchedule`
    naming what was given."""
    if type(value) in (int, float):
        if not math.isfinite(value):  # type: ignore[arg-type]
            raise InvalidSchedule(f"expires must be a finite number of seconds; got {value!r}")
        value = timedelta(seconds=value)  # type: ignore[arg-type]
    if isinstance(value, timedelta):
        if value <= timedelta(0):
            raise InvalidSchedule(f"expires must be a positive delay; got {value}")
        return value
    if isinstance(value, datetime) and instant_allowed:
        if value.tzinfo is None or value.utcoffset() is None:
            raise InvalidSchedule(
                f"expires={value.isoformat()} is naive; pass a timezone-aware datetime "
                "(for example with tzinfo=datetime.UTC)"
            )
        return value.astimezone(UTC)
    wanted = "a delay (seconds or a timedelta)"
    if instant_allowed:
        wanted += " or an aware datetime"
    else:
        wanted += " (a default deadline applies to every enqueue, so no fixed instant)"
    raise InvalidSchedule(f"expires must be {wanted}; got {value!r}")


def deadline(expiry: Expiry | None, due: datetime) -> datetime | None:
    """The ``expires_at`` of a job due at ``due``: ``due`` plus a delay, or the instant,
    which must come after ``due`` (else the job could never run: refused)."""
    if expiry is None:
        return None
    if isinstance(expiry, timedelta):
        return due + expiry
    if expiry <= due:
        raise InvalidSchedule(
            f"expires={expiry.isoformat()} is not after the job is due ({due.isoformat()}): "
            "it could never start"
        )
    return expiry
