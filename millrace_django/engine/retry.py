"""Retry policies and the backoff arithmetic.

A policy is plain data (:class:`~millrace_django.contract.RetrySpec`) stored on every job
when it is enqueued, so changing the configuration only affects later jobs. Retry math
consumes *failures*, never attempts: an interrupted run (crash, deploy, lost lease) does
not spend the retry budget.
"""

from __future__ import annotations

import random as _random
from collections.abc import Callable, Collection
from dataclasses import replace
from datetime import timedelta

from millrace_django.contract import RetryKind, RetrySpec
from millrace_django.engine.errors import InvalidRetry

_MAX_EXPONENT = 62
"""Doubling stops here; ``base * 2**62`` dwarfs any sane ``max`` anyway."""

_MAX_MICROSECONDS = int(timedelta.max / timedelta(microseconds=1))


class Retry:
    """Constructors for the three policy shapes (they return a validated ``RetrySpec``)."""

    @staticmethod
    def none() -> RetrySpec:
        """The first failure is final."""
        return RetrySpec(kind=RetryKind.NONE, max_attempts=1)

    @staticmethod
    def fixed(delay: timedelta, max_attempts: int) -> RetrySpec:
        """Wait ``delay`` between runs; ``max_attempts`` counts every run, the first too."""
        return validate_retry(
            RetrySpec(
                kind=RetryKind.FIXED,
                max_attempts=max_attempts,
                base_delay=delay,
                max_delay=delay,
            )
        )

    @staticmethod
    def exponential(
        max_attempts: int,
        base: timedelta = timedelta(seconds=5),
        max: timedelta = timedelta(hours=1),
        jitter: bool = False,
    ) -> RetrySpec:
        """Wait ``base * 2**(n-1)`` after the n-th failure, capped at ``max``.

        ``exponential(5)`` waits 5, 10, 20 and 40 seconds, and the fifth failure is final.
        ``jitter`` spreads retries of jobs that failed together ("equal jitter": a random
        delay between half and all of the computed one).
        """
        return validate_retry(
            RetrySpec(
                kind=RetryKind.EXPONENTIAL,
                max_attempts=max_attempts,
                base_delay=base,
                max_delay=max,
                jitter=jitter,
            )
        )


def validate_retry(spec: RetrySpec) -> RetrySpec:
    """Return ``spec`` if it is usable, else raise :class:`InvalidRetry` saying why."""
    if type(spec.max_attempts) is not int or spec.max_attempts < 1:
        raise InvalidRetry(
            f"max_attempts counts every run including the first, so it must be an "
            f"integer >= 1; got {spec.max_attempts!r}"
        )
    for name, delay in (("base delay", spec.base_delay), ("max delay", spec.max_delay)):
        if not isinstance(delay, timedelta):
            raise InvalidRetry(f"the {name} must be a timedelta; got {delay!r}")
        if delay < timedelta(0):
            raise InvalidRetry(f"the {name} must not be negative; got {delay}")
    for name, classes in (("retry_on", spec.retry_on), ("give_up_on", spec.give_up_on)):
        if not isinstance(classes, tuple) or not all(isinstance(c, str) for c in classes):
            raise InvalidRetry(f"{name} must be a tuple of class names; got {classes!r}")
    if spec.kind is RetryKind.EXPONENTIAL and spec.max_delay < spec.base_delay:
        raise InvalidRetry(
            f"the max delay ({spec.max_delay}) is below the base delay ({spec.base_delay}); "
            "every retry would wait the max delay"
        )
    return spec


type ExceptionClasses = type[BaseException] | tuple[type[BaseException], ...]
"""What ``retry_on=`` and ``give_up_on=`` take, as ``except`` does."""


def exception_classes(option: str, value: object) -> tuple[type[BaseException], ...]:
    """``value`` (one exception class or a non-empty tuple of them) as a tuple;
    :class:`InvalidRetry` naming ``option`` otherwise."""
    classes = value if isinstance(value, tuple) else (value,)
    if not classes:
        raise InvalidRetry(f"{option} needs at least one exception class; got ()")
    for cls in classes:
        if not isinstance(cls, type) or not issubclass(cls, BaseException):
            raise InvalidRetry(f"{option} takes an exception class or a tuple of them; got {cls!r}")
    return classes


def with_filters(
    spec: RetrySpec,
    retry_on: tuple[type[BaseException], ...] | None,
    give_up_on: tuple[type[BaseException], ...] | None,
) -> RetrySpec:
    """``spec`` with the filters that are given (by class name) in place of its own."""
    if retry_on is None and give_up_on is None:
        return spec
    return replace(
        spec,
        retry_on=spec.retry_on if retry_on is None else _names(retry_on),
        give_up_on=spec.give_up_on if give_up_on is None else _names(give_up_on),
    )


def _names(classes: tuple[type[BaseException], ...]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(class_name(cls) for cls in classes))


def class_name(cls: type) -> str:
    """``"module.qualname"``: how a filter names a class, matched by name so that the
    worker need not import the classes to compare (nor the job's child process send
    back an exception that may not pickle)."""
    return f"{cls.__module__}.{cls.__qualname__}"


def raised_classes(error: BaseException) -> tuple[str, ...]:
    """The names of ``error``'s class and of every class it derives from."""
    return tuple(class_name(cls) for cls in type(error).__mro__)


def gives_up(spec: RetrySpec, classes: Collection[str] | None) -> bool:
    """Whether ``spec``'s filters make a failure final whatever its budget: the raised
    exception (its class ``classes``, with their bases) is one of ``give_up_on``, or
    ``retry_on`` is set and it is none of them. ``give_up_on`` wins. ``None``: the
    failure raised nothing (an unstorable result), which the filters leave alone."""
    if classes is None or not (spec.give_up_on or spec.retry_on):
        return False
    if any(name in spec.give_up_on for name in classes):
        return True
    return bool(spec.retry_on) and not any(name in spec.retry_on for name in classes)


def next_delay(
    spec: RetrySpec, failures: int, *, random: Callable[[], float] = _random.random
) -> timedelta | None:
    """How long to wait before the next run, or ``None`` when the job is dead.

    ``failures`` is the number of failures recorded *including* the one just seen
    (1-based). ``random`` returns a float in [0, 1) and only matters with jitter.
    """
    if spec.kind is RetryKind.NONE or failures >= spec.max_attempts:
        return None
    if spec.kind is RetryKind.FIXED:
        delay = spec.base_delay
    else:
        base = spec.base_delay // timedelta(microseconds=1)
        cap = spec.max_delay // timedelta(microseconds=1)
        exponent = min(max(failures - 1, 0), _MAX_EXPONENT)
        delay = timedelta(microseconds=min(base << exponent, cap, _MAX_MICROSECONDS))
    if spec.jitter and delay:
        half = delay / 2
        delay = half + (delay - half) * random()
    return delay
