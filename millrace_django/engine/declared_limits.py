"""The flow-control limits a project declares (``@job(concurrency=, rate=)``, a queue's
in the settings), checked where they are given. Which of them a new job carries is
:mod:`~millrace_django.engine.limits`'s job."""

from __future__ import annotations

from millrace_django.contract import Limit, Rate, queue_scope


def rate_of(value: Rate | str | None) -> Rate | None:
    """``value`` as a :class:`Rate` (``"10/s"``, ``"600/m"``...); ``ValueError`` naming
    the accepted forms otherwise."""
    if value is None:
        return None
    if not isinstance(value, str | Rate):
        raise TypeError(f"rate must be a string such as '10/s' or a Rate; got {value!r}")
    return Rate.parse(value)


def concurrency_of(value: object) -> int | None:
    """``value`` as a concurrency limit: ``None`` or an integer of at least 1."""
    if value is not None and (type(value) is not int or value < 1):
        raise ValueError(f"concurrency must be an integer of at least 1; got {value!r}")
    return value  # type: ignore[return-value]


def queue_limit(queue: str, concurrency: int | None, rate: Rate | str | None) -> Limit:
    """The limit of every job of ``queue``."""
    return Limit(scope=queue_scope(queue), concurrency=concurrency, rate=rate_of(rate))
