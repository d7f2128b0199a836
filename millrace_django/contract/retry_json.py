"""A retry policy as JSON and back: the form every provider stores on each job, and the
workflow cursor keeps for an instance's jobs."""

from __future__ import annotations

from datetime import timedelta
from functools import lru_cache
from typing import Any

from millrace_django.contract.records import RetryKind, RetrySpec

_MICROSECOND = timedelta(microseconds=1)


def retry_json(retry: RetrySpec) -> dict[str, Any]:
    """A policy as JSON (delays in whole microseconds, so it reads back exactly; the
    filters only when set)."""
    stored: dict[str, Any] = {
        "kind": retry.kind.value,
        "max_attempts": retry.max_attempts,
        "base_delay_us": retry.base_delay // _MICROSECOND,
        "max_delay_us": retry.max_delay // _MICROSECOND,
        "jitter": retry.jitter,
    }
    if retry.retry_on:
        stored["retry_on"] = list(retry.retry_on)
    if retry.give_up_on:
        stored["give_up_on"] = list(retry.give_up_on)
    return stored


def retry_of(stored: Any) -> RetrySpec:
    """The policy :func:`retry_json` wrote; ``KeyError``, ``TypeError`` or ``ValueError``
    for anything else (a value of another type included: ``"3"`` attempts is refused,
    not read as 3)."""
    values = (stored["max_attempts"], stored["base_delay_us"], stored["max_delay_us"])
    jitter = stored["jitter"]
    retry_on = tuple(stored.get("retry_on", ()))
    give_up_on = tuple(stored.get("give_up_on", ()))
    if (
        any(type(value) is not int for value in values)
        or type(jitter) is not bool
        or any(type(name) is not str for name in (*retry_on, *give_up_on))
    ):
        raise TypeError(f"not a stored retry policy: {stored!r}")
    return _policy(stored["kind"], *values, jitter, retry_on, give_up_on)


@lru_cache(maxsize=256, typed=True)
def _policy(
    kind: str,
    max_attempts: int,
    base_delay_us: int,
    max_delay_us: int,
    jitter: bool,
    retry_on: tuple[str, ...],
    give_up_on: tuple[str, ...],
) -> RetrySpec:
    """One (immutable) policy per distinct stored value: every claimed job and every
    workflow step reads one, and most share a few."""
    return RetrySpec(
        kind=RetryKind(kind),
        max_attempts=max_attempts,
        base_delay=base_delay_us * _MICROSECOND,
        max_delay=max_delay_us * _MICROSECOND,
        jitter=jitter,
        retry_on=retry_on,
        give_up_on=give_up_on,
    )
