"""Which flow-control limits a new job carries: its queue's (from the settings) and its
function's (from ``@job``/``using``), the latter per key when the function names an
argument to key them by. Resolved when the job is created, like its retry policy, so a
changed limit applies to jobs created afterwards."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from millrace_django.contract import Invocation, Limit, job_scope

if TYPE_CHECKING:
    from millrace_django.engine.registry import JobDefinition, JobOptions

MAX_KEY_LENGTH = 200
"""The longest key value a limit is keyed by (it is part of the scope's name)."""


def job_limits(
    definition: JobDefinition[..., Any],
    options: JobOptions,
    queue: str,
    queue_limits: Mapping[str, Limit],
) -> tuple[Limit, ...]:
    """The limits a job of ``definition`` with ``options`` in ``queue`` carries; a keyed
    function's last one names the function's scope until :func:`keyed` names its key's."""
    limits = [queue_limits[queue]] if queue in queue_limits else []
    if options.concurrency is not None or options.rate is not None:
        limits.append(
            Limit(
                scope=job_scope(definition.target),
                concurrency=options.concurrency,
                rate=options.rate,
            )
        )
    return tuple(limits)


def keyed(
    limits: tuple[Limit, ...], definition: JobDefinition[..., Any], invocation: Invocation
) -> tuple[Limit, ...]:
    """``limits`` (from :func:`job_limits`) with the function's scope narrowed to the key
    ``invocation`` gives, where ``definition`` keys its limits."""
    if not limits or definition.limit_key is None:
        return limits
    function_scope = job_scope(definition.target)
    if limits[-1].scope != function_scope:
        return limits
    key = key_of(definition, invocation)
    return (*limits[:-1], replace(limits[-1], scope=job_scope(definition.target, key)))


def limits_of_call(
    definition: JobDefinition[..., Any] | None,
    queue: str,
    invocation: Invocation,
    queue_limits: Mapping[str, Limit],
) -> tuple[Limit, ...]:
    """The limits of a job the engine makes itself (a recurring occurrence, a failure
    observer): its queue's, and those of ``definition``'s own options keyed by
    ``invocation`` (none when the function is not importable here)."""
    if definition is None:
        return (queue_limits[queue],) if queue in queue_limits else ()
    limits = job_limits(definition, definition.options, queue, queue_limits)
    return keyed(limits, definition, invocation)


def key_of(definition: JobDefinition[..., Any], invocation: Invocation) -> str:
    """The value of the argument ``definition`` keys its limits by, as text."""
    bound = definition.signature.bind(*invocation.args, **invocation.kwargs)
    bound.apply_defaults()
    value = bound.arguments[definition.limit_key]  # type: ignore[index]
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise TypeError(
            f"{definition.target} keys its limits by {definition.limit_key!r}, which must be "
            f"a str or an int; got {value!r}"
        )
    key = str(value)
    if len(key) > MAX_KEY_LENGTH:
        raise ValueError(
            f"{definition.target} keys its limits by {definition.limit_key!r}, at most "
            f"{MAX_KEY_LENGTH} characters; got {len(key)}"
        )
    return key
