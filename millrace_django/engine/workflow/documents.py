"""Data and payloads at the boundary: JSON documents in, dataclasses converted.

An instance's data is a JSON object. Callers may pass a dict or a dataclass instance
(turned into a dict with :func:`dataclasses.asdict`); activities always see the dict.
A signal payload is checked against what the waiting step declared: a dataclass (an
object with its fields: required ones present, no unknown ones, simple annotations
checked), ``dict`` (any object), another JSON type, or ``None`` (any JSON value).
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from typing import Any, cast

from millrace_django.contract import JSON
from millrace_django.engine.jsonvalues import json_problem
from millrace_django.engine.workflow.errors import InvalidSignalPayload, InvalidWorkflowData

type Document = dict[str, JSON]


def to_document(data: object) -> Document:
    """``data`` as a fresh JSON object; raises :class:`InvalidWorkflowData` saying why not."""
    if data is None:
        return {}
    if dataclasses.is_dataclass(data) and not isinstance(data, type):
        data = dataclasses.asdict(data)
    if not isinstance(data, Mapping):
        raise InvalidWorkflowData(
            f"workflow data must be a dict or a dataclass instance; got {type(data).__name__}"
        )
    document = dict(data)
    problem = json_problem(document)
    if problem is not None:
        raise InvalidWorkflowData(f"workflow data must be JSON: it {problem}")
    copied: Document = _json_copy(document)
    return copied


def check_document(data: object, where: str) -> Document:
    """What an activity left in ``context.data``, checked (the step fails if it is not
    a JSON object)."""
    if not isinstance(data, dict):
        raise InvalidWorkflowData(f"{where} left data that is not a dict: {type(data).__name__}")
    problem = json_problem(data)
    if problem is not None:
        raise InvalidWorkflowData(f"{where} left data that is not JSON: it {problem}")
    return cast(Document, data)


def from_document[T](data: JSON, as_: type[T]) -> T:
    """The document as an instance of the dataclass ``as_`` (its own fields only)."""
    if not (dataclasses.is_dataclass(as_) and isinstance(as_, type)):
        raise TypeError(f"as_ must be a dataclass; got {as_!r}")
    if not isinstance(data, dict):
        raise InvalidWorkflowData(f"the stored data is not an object: {data!r}")
    names = {f.name for f in dataclasses.fields(as_) if f.init}
    return as_(**{key: value for key, value in data.items() if key in names})


def type_name(expected: type | None) -> str | None:
    """The name a bookmark records for the payload a step expects."""
    if expected is None:
        return None
    return f"{expected.__module__}.{expected.__qualname__}"


def check_expected(expected: object, where: str) -> type | None:
    """Validate a step's ``payload=`` declaration at definition time."""
    if expected is None:
        return None
    if isinstance(expected, type) and (
        dataclasses.is_dataclass(expected) or expected in (dict, list, str, int, float, bool)
    ):
        return expected
    raise TypeError(
        f"{where}: payload= must be a dataclass, dict, list, str, int, float, bool or None; "
        f"got {expected!r}"
    )


def check_payload(expected: type | None, payload: object, *, signal: str) -> JSON:
    """``payload`` as JSON, if it fits ``expected``; else :class:`InvalidSignalPayload`."""
    if dataclasses.is_dataclass(payload) and not isinstance(payload, type):
        if expected is not None and not isinstance(payload, expected):
            raise InvalidSignalPayload(
                f"signal {signal!r} expects a {_describe(expected)}; got a {type(payload).__name__}"
            )
        payload = dataclasses.asdict(payload)
    problem = json_problem(payload)
    if problem is not None:
        raise InvalidSignalPayload(f"the payload of signal {signal!r} must be JSON: it {problem}")
    value = cast(JSON, _json_copy(payload))
    if expected is None:
        return value
    if dataclasses.is_dataclass(expected):
        _check_fields(expected, value, signal)
    elif not _is_json_instance(value, expected):
        raise InvalidSignalPayload(
            f"signal {signal!r} expects a {_describe(expected)}; got {_json_kind(value)}"
        )
    return value


def _check_fields(expected: type, value: JSON, signal: str) -> None:
    if not isinstance(value, dict):
        raise InvalidSignalPayload(
            f"signal {signal!r} expects a {_describe(expected)} (a JSON object); "
            f"got {_json_kind(value)}"
        )
    fields = {f.name: f for f in dataclasses.fields(expected) if f.init}
    unknown = sorted(set(value) - set(fields))
    if unknown:
        raise InvalidSignalPayload(
            f"signal {signal!r} expects a {_describe(expected)}, which has no field "
            f"{', '.join(map(repr, unknown))} (its fields: {', '.join(fields) or 'none'})"
        )
    missing = [
        name
        for name, f in fields.items()
        if name not in value
        and f.default is dataclasses.MISSING
        and f.default_factory is dataclasses.MISSING
    ]
    if missing:
        raise InvalidSignalPayload(
            f"signal {signal!r} expects a {_describe(expected)}; missing "
            f"{', '.join(map(repr, missing))}"
        )
    try:
        hints = typing.get_type_hints(expected)
    except Exception:  # unresolvable annotations: the field names were checked
        return
    for name, item in value.items():
        hint = hints.get(name)
        if hint is not None and not _fits(item, hint):
            raise InvalidSignalPayload(
                f"signal {signal!r}: field {name!r} of {_describe(expected)} must be "
                f"{_describe_hint(hint)}; got {_json_kind(item)}"
            )


def _fits(value: JSON, hint: object) -> bool:
    """A best-effort check of simple annotations; anything unusual is accepted."""
    if hint is Any or hint is object:
        return True
    if hint is None or hint is type(None):
        return value is None
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(_fits(value, arm) for arm in typing.get_args(hint))
    if origin is typing.Literal:
        return value in typing.get_args(hint)
    if origin is not None:
        hint = origin
    if isinstance(hint, type) and hint in (dict, list, str, int, float, bool):
        return _is_json_instance(value, hint)
    if isinstance(hint, type) and dataclasses.is_dataclass(hint):
        return isinstance(value, dict)
    return True


def _is_json_instance(value: JSON, kind: type) -> bool:
    if kind is bool:
        return isinstance(value, bool)
    if kind is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if kind is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    return isinstance(value, kind)


def _json_kind(value: object) -> str:
    if value is None:
        return "null"
    names = {bool: "a boolean", int: "a number", float: "a number", str: "a string"}
    names.update({list: "an array", dict: "an object"})
    return names.get(type(value), type(value).__name__)


def _describe(expected: type) -> str:
    return expected.__qualname__


def _describe_hint(hint: object) -> str:
    return getattr(hint, "__qualname__", None) or str(hint)


def _json_copy[V](value: V) -> V:
    """A deep copy of a JSON value (cheaper than a JSON round trip)."""
    if isinstance(value, dict):
        return cast(V, {key: _json_copy(item) for key, item in value.items()})
    if isinstance(value, list):
        return cast(V, [_json_copy(item) for item in value])
    return value
