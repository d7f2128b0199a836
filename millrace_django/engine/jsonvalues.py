"""Which values survive a JSON round trip unchanged, and why the others do not.

Arguments, results and progress are stored as JSON. A value that comes back different
(a tuple as a list, a datetime as nothing at all) would make the job run with other
arguments than it was given, so such values are refused up front with the reason. So is
text holding the character U+0000, which PostgreSQL cannot store in JSON: refused on
every database, so a job that works on SQLite does not fail in production.
"""

from __future__ import annotations

import json
import math
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from uuid import UUID

_HINTS: tuple[tuple[type, str], ...] = (
    (tuple, "is a tuple, which JSON turns into a list; pass a list"),
    (set, "is a set, which JSON cannot carry; pass a sorted list"),
    (frozenset, "is a frozenset, which JSON cannot carry; pass a sorted list"),
    (datetime, "is a datetime, which JSON cannot carry; pass datetime.isoformat()"),
    (date, "is a date, which JSON cannot carry; pass date.isoformat()"),
    (time, "is a time, which JSON cannot carry; pass time.isoformat()"),
    (timedelta, "is a timedelta, which JSON cannot carry; pass total_seconds()"),
    (Decimal, "is a Decimal, which JSON would turn into a float; pass str(value)"),
    (UUID, "is a UUID, which JSON cannot carry; pass str(value)"),
    (bytes, "is bytes, which JSON cannot carry; pass a base64 string"),
)


NUL_PROBLEM = (
    "contains the character U+0000 (NUL), which PostgreSQL cannot store in JSON; "
    "remove it, or pass the text encoded (base64)"
)


def json_problem(value: object) -> str | None:
    """Why ``value`` would not round-trip through JSON unchanged, or ``None`` if it does."""
    return _problem(value, "", set())


def _problem(value: object, where: str, path: set[int]) -> str | None:
    kind = type(value)
    if kind is str:
        return _at(where, NUL_PROBLEM) if "\x00" in value else None  # type: ignore[operator]
    if value is None or kind in (bool, int):
        return None
    if kind is float:
        if math.isfinite(value):  # type: ignore[arg-type]
            return None
        return _at(where, f"is {value!r}, which is not valid JSON")
    if kind is list or kind is dict:
        if id(value) in path:
            return _at(where, "contains itself")
        path.add(id(value))
        try:
            return _container_problem(value, where, path)
        finally:
            path.discard(id(value))
    return _at(where, _describe_foreign(value))


def _container_problem(value: object, where: str, path: set[int]) -> str | None:
    if isinstance(value, list):
        for index, item in enumerate(value):
            if (problem := _problem(item, f"{where}[{index}]", path)) is not None:
                return problem
        return None
    assert isinstance(value, dict)
    for key, item in value.items():
        if type(key) is not str:
            return _at(
                where,
                f"has the key {key!r}, but JSON object keys are strings "
                f"({key!r} would come back as {json.dumps(str(key))})",
            )
        if "\x00" in key:
            return _at(where, f"has a key that {NUL_PROBLEM}")
        if (problem := _problem(item, f"{where}[{key!r}]", path)) is not None:
            return problem
    return None


def _describe_foreign(value: object) -> str:
    if hasattr(value, "_meta") and hasattr(value, "pk"):
        return (
            f"is a model instance ({type(value).__name__}), which JSON cannot carry; "
            "pass its primary key (obj.pk) instead"
        )
    for kind, hint in _HINTS:
        if isinstance(value, kind):
            return hint
    if isinstance(value, bool | int | str | float | list | dict):
        return (
            f"is a {type(value).__name__}, a subclass JSON would turn into a plain "
            f"{_json_base(value)}; pass a plain value"
        )
    return f"is a {type(value).__name__}, which JSON cannot carry; pass plain JSON data"


def _json_base(value: object) -> str:
    for kind in (bool, int, float, str, list, dict):
        if isinstance(value, kind):
            return kind.__name__
    return "value"  # pragma: no cover - callers only pass JSON subclasses


def _at(where: str, problem: str) -> str:
    return f"{problem} (at {where})" if where else problem


def storable_text(text: str) -> str:
    """``text`` with each NUL character written ``\\x00``: a job's own text (its error,
    its log lines) may echo binary input, and PostgreSQL refuses NUL in any text."""
    return text.replace("\x00", "\\x00")
