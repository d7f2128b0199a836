"""Capturing a call as a stored invocation, and finding it again at run time.

At enqueue the arguments are bound against the job's signature and must survive JSON
unchanged, so the worker calls the function with exactly what the caller passed; their
JSON must also fit a size limit, so every database stores them (MariaDB refuses a
statement over its ``max_allowed_packet``) and large data travels by reference. At run
time the target is imported by name; a target or arguments that no longer fit are
:class:`~millrace_django.engine.errors.UnrunnableJob` errors, which the worker turns
into a dead job (retrying cannot bring a renamed function back).
"""

from __future__ import annotations

import importlib
import inspect
import json
import math
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

from millrace_django.contract import JSON, Invocation
from millrace_django.engine.errors import (
    ArgumentsTooLarge,
    InvalidJobArguments,
    InvalidStoredArguments,
    UnresolvableTarget,
    UnserializableArgument,
)
from millrace_django.engine.jsonvalues import json_problem
from millrace_django.engine.registry import CONTEXT_PARAMETER, JobDefinition, lookup

_BREAKING = "renaming or moving a job function while jobs are queued is a breaking deploy"
_PLAIN_SEQUENCES = (list, tuple)
_PLAIN_MAPPINGS = (dict, MappingProxyType)  # (the latter: a call without arguments)

MAX_ARGUMENTS_BYTES = 1 << 20
"""The default limit on a call's arguments as stored: ``json.dumps({"args": [...],
"kwargs": {...}})``, non-ASCII escaped, so one character is one byte."""


def capture(
    definition: JobDefinition[..., Any],
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    *,
    max_bytes: int = MAX_ARGUMENTS_BYTES,
) -> Invocation:
    """Bind and check a call; raise :class:`InvalidJobArguments` (a ``TypeError``)
    naming the culprit when it does not fit or would not survive JSON, and
    :class:`ArgumentsTooLarge` when its JSON is over ``max_bytes``."""
    target = definition.target
    if definition.accepts_context and CONTEXT_PARAMETER in kwargs:
        raise InvalidJobArguments(
            f"cannot enqueue {target}: 'context' is supplied by the worker at run time"
        )
    try:
        shape = definition.call_shape(len(args), tuple(kwargs))
    except TypeError as error:
        raise InvalidJobArguments(f"cannot enqueue {definition.describe_call()}: {error}") from None
    if not args and not kwargs:
        return Invocation.without_arguments(target)  # the commonest call: nothing to copy
    # A copy, so later mutation by the caller cannot reach the stored job.
    budget = [max_bytes - _ITEM * (1 + len(args) + len(kwargs)) - _CHAR * sum(map(len, kwargs))]
    try:
        if shape.as_given:
            stored_args = [_plain_copy(value, 0, budget) for value in args]
            stored_kwargs = {name: _plain_copy(value, 0, budget) for name, value in kwargs.items()}
        else:
            values = (*args, *kwargs.values())
            stored_args = [_plain_copy(values[n], 0, budget) for n in shape.args]
            stored_kwargs = {name: _plain_copy(values[n], 0, budget) for name, n in shape.kwargs}
    except _NotPlain:
        return _checked_capture(definition, args, kwargs, max_bytes)
    if budget[0] < 0:  # only a bound was over: measure
        _check_size(target, _stored_text(stored_args, stored_kwargs), max_bytes)
    return Invocation(target=target, args=tuple(stored_args), kwargs=stored_kwargs)


class _NotPlain(Exception):
    """A value :func:`_plain_copy` leaves to the full check."""


_COPY_DEPTH = 32
_INT_BOUND = 1 << 64
_CHAR = 12
"""The most bytes one character of text takes in the stored JSON (an astral one is
written as two ``\\u`` escapes)."""
_ITEM = 32
"""The most bytes a value takes besides its text: quotes, a number, brackets, and the
separator and quoted-key punctuation around it."""


def _plain_copy(value: Any, depth: int, budget: list[int]) -> JSON:
    """``value`` as a JSON round trip would give it back, when that is ``value`` itself:
    plain JSON types only (scalars as they are, lists and dicts copied), text without
    U+0000. Anything else (or a huge int, a deep or cyclic structure) raises
    :class:`_NotPlain`, for the full check to accept or explain. Takes from
    ``budget[0]`` a bound on the bytes the value's members take as JSON."""
    kind = type(value)
    if kind is str:
        if "\x00" in value:
            raise _NotPlain
        budget[0] -= _CHAR * len(value)
        return value  # type: ignore[no-any-return]
    if value is None or kind is bool:
        return value  # type: ignore[no-any-return]
    if kind is int:
        if -_INT_BOUND < value < _INT_BOUND:
            return value  # type: ignore[no-any-return]
    elif kind is float:
        if math.isfinite(value):
            return value  # type: ignore[no-any-return]
    elif depth < _COPY_DEPTH:
        if kind is list:
            budget[0] -= _ITEM * len(value)
            return [_plain_copy(item, depth + 1, budget) for item in value]
        if kind is dict:
            budget[0] -= _ITEM * len(value)
            copy: dict[str, JSON] = {}
            for key, item in value.items():
                if type(key) is not str or "\x00" in key:
                    raise _NotPlain
                budget[0] -= _CHAR * len(key)
                copy[key] = _plain_copy(item, depth + 1, budget)
            return copy
    raise _NotPlain


def _checked_capture(
    definition: JobDefinition[..., Any],
    args: Sequence[Any],
    kwargs: Mapping[str, Any],
    max_bytes: int,
) -> Invocation:
    """The full check of a call that fits, naming the first culprit in signature order,
    and a JSON copy of what passes it."""
    target = definition.target
    bound = definition.signature.bind(*args, **kwargs)
    for name, value in bound.arguments.items():
        kind = definition.signature.parameters[name].kind
        if kind is inspect.Parameter.VAR_POSITIONAL:
            for index, item in enumerate(value):
                _check(target, f"*{name}[{index}]", item)
        elif kind is inspect.Parameter.VAR_KEYWORD:
            for key, item in value.items():
                _check(target, key, item)
        else:
            _check(target, name, value)
    text = _stored_text(list(bound.args), bound.kwargs)
    _check_size(target, text, max_bytes)
    stored: dict[str, Any] = json.loads(text)
    return Invocation(target=target, args=tuple(stored["args"]), kwargs=stored["kwargs"])


def _check(target: str, argument: str, value: object) -> None:
    problem = json_problem(value)
    if problem is not None:
        raise UnserializableArgument(target, argument, problem)


def _stored_text(args: list[Any], kwargs: Mapping[str, Any]) -> str:
    return json.dumps({"args": args, "kwargs": kwargs})


def _check_size(target: str, text: str, max_bytes: int) -> None:
    if len(text) > max_bytes:
        raise ArgumentsTooLarge(target, len(text), max_bytes)


def resolve(target: str) -> JobDefinition[..., Any]:
    """The ``@job`` behind ``"package.module:qualname"``, importing the module if needed;
    raises :class:`UnresolvableTarget` with the reason."""
    module_name, _, name = target.partition(":") if isinstance(target, str) else ("", "", "")
    if not module_name or not name:
        raise UnresolvableTarget(f"{target!r} is not a 'package.module:function' job target")
    found = lookup(target)
    if found is not None:
        return found
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise UnresolvableTarget(
            f"cannot import module {module_name!r} for job {target}: {error} ({_BREAKING})"
        ) from error
    except Exception as error:
        raise UnresolvableTarget(
            f"importing module {module_name!r} for job {target} raised "
            f"{type(error).__name__}: {error}"
        ) from error
    attribute = getattr(module, name, None)
    if attribute is None:
        raise UnresolvableTarget(f"module {module_name!r} has no job {name!r} ({_BREAKING})")
    if not isinstance(attribute, JobDefinition):
        raise UnresolvableTarget(f"{target} exists but is not decorated with @job")
    return attribute


def find(target: str) -> JobDefinition[..., Any] | None:
    """Like :func:`resolve`, but ``None`` instead of an error (for optional metadata)."""
    try:
        return resolve(target)
    except UnresolvableTarget:
        return None


def decode(
    definition: JobDefinition[..., Any], invocation: Invocation
) -> tuple[list[Any], dict[str, Any]]:
    """The stored arguments, checked against the function as deployed now."""
    args, kwargs = invocation.args, invocation.kwargs
    if type(args) not in _PLAIN_SEQUENCES and (
        isinstance(args, str | bytes) or not isinstance(args, Sequence)
    ):
        raise InvalidStoredArguments(
            f"stored positional arguments of {definition.target} are not a list: {args!r}"
        )
    if (type(kwargs) not in _PLAIN_MAPPINGS and not isinstance(kwargs, Mapping)) or (
        kwargs and not all(isinstance(k, str) for k in kwargs)
    ):
        raise InvalidStoredArguments(
            f"stored keyword arguments of {definition.target} are not an object: {kwargs!r}"
        )
    if definition.accepts_context and CONTEXT_PARAMETER in kwargs:
        raise InvalidStoredArguments(
            f"stored arguments of {definition.target} name 'context', which the worker supplies"
        )
    try:
        definition.check_call(args, kwargs)
    except TypeError as error:
        raise InvalidStoredArguments(
            f"stored arguments no longer fit {definition.describe_call()}: "
            f"{error} (changing a job's signature while jobs are queued is a breaking deploy)"
        ) from None
    return list(args), dict(kwargs)
