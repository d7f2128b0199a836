"""The one place that reads ``settings.MILLRACE``: a frozen, validated settings object.

Every invalid value becomes a system-check error with an id and a hint (``checks.py``),
so a bad configuration fails ``manage.py check`` and every command at start-up instead
of a worker at 3 a.m.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import MISSING, dataclass, fields
from datetime import timedelta
from functools import cache
from types import SimpleNamespace
from typing import Any

from django.conf import settings as django_settings
from django.core.signals import setting_changed
from django.dispatch import receiver
from django.utils.module_loading import import_string

from millrace_django.contract import Limit, RetrySpec
from millrace_django.engine.declared_limits import concurrency_of, queue_limit
from millrace_django.engine.errors import InvalidRetry
from millrace_django.engine.retry import validate_retry
from millrace_django.runtime.runtime_settings import RuntimeSettings
from millrace_django.storage import PROVIDERS


@dataclass(frozen=True, slots=True, kw_only=True)
class MillraceSettings(RuntimeSettings):
    """Validated settings: the runtime's (and their defaults) plus where jobs are stored."""

    storage: str = "orm"
    """``"orm"``, ``"memory"``, or the dotted path of a provider factory (called as
    ``factory(clock, alias=database, statement_timeout=statement_timeout)``)."""
    database: str = "default"
    clock: str = "millrace_django.clock.SystemClock"
    """Dotted path to the callable that makes the process's source of time (a
    :class:`~millrace_django.clock.Clock`); calibrated to the database's if ``clock_sync``."""
    statement_timeout: timedelta = timedelta(seconds=30)
    """Bound on each statement (lock waits included) of the ``orm`` storage: a database
    that hangs makes a storage call fail after this long instead of blocking a worker."""


@dataclass(frozen=True, slots=True)
class SettingProblem:
    """One invalid value: the system check's id, message and hint."""

    id: str
    message: str
    hint: str


class InvalidSettings(ValueError):
    def __init__(self, problems: list[SettingProblem]) -> None:
        super().__init__("; ".join(f"{p.id}: {p.message}" for p in problems))
        self.problems = problems


def _duration(value: Any) -> timedelta:
    if isinstance(value, timedelta):
        return value
    if isinstance(value, int | float) and not isinstance(value, bool):
        return timedelta(seconds=value)
    raise TypeError("a timedelta or a number of seconds")


def _positive_duration(value: Any) -> timedelta:
    duration = _duration(value)
    if duration <= timedelta(0):
        raise ValueError("a positive duration")
    return duration


def _non_negative_duration(value: Any) -> timedelta:
    duration = _duration(value)
    if duration < timedelta(0):
        raise ValueError("a duration of zero or more")
    return duration


def _optional_positive_duration(value: Any) -> timedelta | None:
    return None if value is None else _positive_duration(value)


def _positive_int(value: Any) -> int:
    if type(value) is not int or value < 1:
        raise ValueError("an integer of at least 1")
    return value


def _non_negative_int(value: Any) -> int:
    if type(value) is not int or value < 0:
        raise ValueError("an integer of 0 or more")
    return value


def _name(value: Any) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError("a non-blank string")
    return value


def _queues(value: Any) -> frozenset[str]:
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise TypeError("a list of queue names")
    queues = frozenset(_name(queue) for queue in value)
    if not queues:
        raise ValueError("at least one queue")
    return queues


_JSONB_LIMIT = (1 << 28) - 1
"""The largest JSON value PostgreSQL's ``jsonb`` stores (255 MiB)."""


def _byte_limit(value: Any) -> int:
    if type(value) is not int or not 1 <= value <= _JSONB_LIMIT:
        raise ValueError(f"a number of bytes from 1 to {_JSONB_LIMIT} (PostgreSQL's jsonb limit)")
    return value


def _boolean(value: Any) -> bool:
    if type(value) is not bool:
        raise TypeError("True or False")
    return value


def _callable_path(value: Any, expected: str) -> str:
    """``value`` if it is the dotted path of something callable, else the error saying
    ``expected``."""
    if not isinstance(value, str):
        raise TypeError(expected)
    try:
        factory = import_string(value)
    except ImportError as error:
        raise ValueError(f"{expected} ({error})") from error
    if not callable(factory):
        raise ValueError(f"{expected} ({value} is not callable)")
    return value


def _clock_factory(value: Any) -> str:
    return _callable_path(
        value,
        "an importable dotted path to a Clock class or factory, such as "
        "'millrace_django.clock.SystemClock'",
    )


def _storage(value: Any) -> str:
    if value in PROVIDERS:
        return str(value)
    return _callable_path(
        value,
        f"one of {', '.join(PROVIDERS)}, or the importable dotted path of a provider "
        "factory, such as 'myproject.storage.make_storage' (see "
        "docs/writing-a-storage-provider.md)",
    )


def _retry(value: Any) -> RetrySpec:
    if not isinstance(value, RetrySpec):
        raise TypeError("a policy from millrace_django.Retry, e.g. Retry.exponential(5)")
    try:
        return validate_retry(value)
    except InvalidRetry as error:
        raise ValueError(str(error)) from error


def _queue_limits(value: Any) -> dict[str, Limit]:
    expected = "a dict of queue name to {'concurrency': N, 'rate': '10/s'} (either or both)"
    if not isinstance(value, Mapping):
        raise TypeError(expected)
    limits: dict[str, Limit] = {}
    for queue, spec in value.items():
        if not isinstance(spec, Mapping) or not spec or set(spec) - {"concurrency", "rate"}:
            raise ValueError(f"{expected}; {queue!r} has {spec!r}")
        try:
            limits[_name(queue)] = queue_limit(
                queue, concurrency_of(spec.get("concurrency")), spec.get("rate")
            )
        except (TypeError, ValueError) as error:
            raise ValueError(f"{expected}; for {queue!r}: {error}") from None
    return limits


_PARSERS: dict[str, tuple[str, Callable[[Any], Any]]] = {
    "STORAGE": ("storage", _storage),
    "DATABASE": ("database", _name),
    "CLOCK": ("clock", _clock_factory),
    "CLOCK_SYNC": ("clock_sync", _boolean),
    "CLOCK_SKEW_WARNING": ("clock_skew_warning", _positive_duration),
    "STATEMENT_TIMEOUT": ("statement_timeout", _positive_duration),
    "QUEUES": ("queues", _queues),
    "DEFAULT_QUEUE": ("default_queue", _name),
    "CONCURRENCY": ("concurrency", _positive_int),
    "ASYNC_CONCURRENCY": ("async_concurrency", _positive_int),
    "LEASE": ("lease", _positive_duration),
    "HEARTBEAT": ("heartbeat", _positive_duration),
    "CLAIM_BATCH": ("claim_batch", _positive_int),
    "POLL_MIN": ("poll_min", _positive_duration),
    "POLL_MAX": ("poll_max", _positive_duration),
    "SCHEDULER_INTERVAL": ("scheduler_interval", _positive_duration),
    "ACTIVATION_BATCH": ("activation_batch", _positive_int),
    "SHUTDOWN_TIMEOUT": ("shutdown_timeout", _non_negative_duration),
    "SHUTDOWN_GRACE": ("shutdown_grace", _non_negative_duration),
    "INTERRUPTION_LIMIT": ("interruption_limit", _positive_int),
    "MAX_ARGUMENTS_BYTES": ("max_arguments_bytes", _byte_limit),
    "DEFAULT_RETRY": ("default_retry", _retry),
    "RETENTION": ("retention", _optional_positive_duration),
    "PURGE_BATCH": ("purge_batch", _positive_int),
    "WORKER_RETENTION": ("worker_retention", _optional_positive_duration),
    "QUEUE_LIMITS": ("queue_limits", _queue_limits),
}
assert {name for name, _ in _PARSERS.values()} == {f.name for f in fields(MillraceSettings)}


def parse_settings(raw: Any, database_aliases: Iterable[str] = ("default",)) -> MillraceSettings:
    """Validate a ``MILLRACE`` dict; raise :class:`InvalidSettings` listing every problem."""
    if raw is None:
        raw = {}
    if not isinstance(raw, Mapping):
        raise InvalidSettings(
            [SettingProblem("millrace.E001", "MILLRACE must be a dict.", "MILLRACE = {...}")]
        )
    problems: list[SettingProblem] = []
    values: dict[str, Any] = {}
    for key, value in raw.items():
        if key not in _PARSERS:
            problems.append(
                SettingProblem(
                    "millrace.E002",
                    f"MILLRACE has an unknown setting {key!r}.",
                    f"Known settings: {', '.join(sorted(_PARSERS))}.",
                )
            )
            continue
        attribute, parse = _PARSERS[key]
        try:
            values[attribute] = parse(value)
        except (TypeError, ValueError) as error:
            problems.append(
                SettingProblem(
                    "millrace.E003",
                    f"MILLRACE[{key!r}] is invalid: {value!r}.",
                    f"Expected {error}.",
                )
            )
    if problems:
        raise InvalidSettings(problems)
    problems.extend(_cross_checks(SimpleNamespace(**(_defaults() | values)), set(database_aliases)))
    if problems:
        raise InvalidSettings(problems)
    return MillraceSettings(**values)


def _defaults() -> dict[str, Any]:
    return {
        f.name: f.default if f.default_factory is MISSING else f.default_factory()
        for f in fields(MillraceSettings)
    }


def _cross_checks(s: Any, aliases: set[str]) -> Iterable[SettingProblem]:
    if s.lease <= s.heartbeat:
        yield SettingProblem(
            "millrace.E004",
            f"MILLRACE['LEASE'] ({s.lease}) must be longer than MILLRACE['HEARTBEAT'] "
            f"({s.heartbeat}).",
            "A lease shorter than the heartbeat expires before it is renewed; keep the lease "
            "several heartbeats long (defaults: 5 minutes and 1 minute).",
        )
    if s.poll_max < s.poll_min:
        yield SettingProblem(
            "millrace.E005",
            "MILLRACE['POLL_MAX'] is shorter than MILLRACE['POLL_MIN'].",
            "Polling backs off from POLL_MIN up to POLL_MAX (defaults: 0.2 s and 5 s).",
        )
    if s.default_queue not in s.queues:
        yield SettingProblem(
            "millrace.E006",
            f"MILLRACE['DEFAULT_QUEUE'] {s.default_queue!r} is not in MILLRACE['QUEUES'].",
            "Jobs without a queue go to the default queue; some worker must claim it.",
        )
    if s.worker_retention is not None and s.worker_retention <= s.lease:
        yield SettingProblem(
            "millrace.E009",
            f"MILLRACE['WORKER_RETENTION'] ({s.worker_retention}) must be longer than "
            f"MILLRACE['LEASE'] ({s.lease}).",
            "The scheduler forgets workers silent for WORKER_RETENTION; one silent for less "
            "than a lease may be alive and holding jobs, and would vanish from the dashboard "
            "and millrace_health --worker. Keep it hours long (default: 1 day), or None.",
        )
    unknown = sorted(set(s.queue_limits) - set(s.queues))
    if unknown:
        yield SettingProblem(
            "millrace.E011",
            f"MILLRACE['QUEUE_LIMITS'] limits {', '.join(map(repr, unknown))}, not in "
            "MILLRACE['QUEUES'].",
            "A queue limit applies to jobs of a queue some node claims from; add the queue "
            "to QUEUES or remove its limit.",
        )
    if s.storage == "orm" and s.database not in aliases:
        yield SettingProblem(
            "millrace.E007",
            f"MILLRACE['DATABASE'] {s.database!r} is not a database alias.",
            f"Use one of the aliases in DATABASES: {', '.join(sorted(aliases))}.",
        )


@cache
def get_settings() -> MillraceSettings:
    """The project's validated settings (cached; reset when a test overrides them)."""
    return parse_settings(
        getattr(django_settings, "MILLRACE", None), django_settings.DATABASES.keys()
    )


@receiver(setting_changed)
def _forget_settings(*, setting: str, **kwargs: object) -> None:
    if setting in ("MILLRACE", "DATABASES"):
        get_settings.cache_clear()
