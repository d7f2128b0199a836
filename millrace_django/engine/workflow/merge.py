"""Three-way merge of JSON documents, for parallel branches that checkpoint at once.

A branch that lost the revision race re-reads the instance and merges what *its*
activity changed (``base`` -> ``ours``) into what is stored now (``theirs``): objects
merge per property, only properties the activity changed are written (additions,
changes and removals), arrays and scalars are replaced wholesale, and a property both
sides changed takes ours (the last writer wins).
"""

from __future__ import annotations

from typing import cast

from millrace_django.contract import JSON

_MISSING = object()


def merge(base: JSON, ours: JSON, theirs: JSON) -> JSON:
    """``theirs`` with the changes from ``base`` to ``ours`` applied (a new value)."""
    if same(ours, base):
        return copied(theirs)
    if same(theirs, base):
        return copied(ours)
    if isinstance(ours, dict) and isinstance(theirs, dict):
        return _merge_objects(base if isinstance(base, dict) else {}, ours, theirs)
    return copied(ours)


def _merge_objects(
    base: dict[str, JSON], ours: dict[str, JSON], theirs: dict[str, JSON]
) -> dict[str, JSON]:
    merged: dict[str, JSON] = {}
    for key in [*theirs, *(k for k in ours if k not in theirs)]:
        b: object = base.get(key, _MISSING)
        o: object = ours.get(key, _MISSING)
        t: object = theirs.get(key, _MISSING)
        if _same_or_missing(o, b):
            value = t  # we did not touch it
        elif _same_or_missing(t, b):
            value = o  # only we changed it (or removed it)
        elif o is _MISSING or t is _MISSING:
            value = o  # both changed, one removed: ours is the last write
        elif isinstance(o, dict) and isinstance(t, dict):
            value = merge(cast(JSON, b) if b is not _MISSING else {}, o, t)  # type: ignore[assignment]
        else:
            value = o
        if value is not _MISSING:
            merged[key] = copied(cast(JSON, value))
    return merged


def copied(value: JSON) -> JSON:
    """A deep copy of the JSON ``value``: objects and arrays copied, the rest (immutable)
    shared. Several times quicker than ``copy.deepcopy``, whose memo of shared and
    cyclic objects a JSON document, read from storage or checked, cannot need."""
    if isinstance(value, dict):
        return {key: copied(item) for key, item in value.items()}
    if isinstance(value, list):
        return [copied(item) for item in value]
    return value


def _same_or_missing(a: object, b: object) -> bool:
    if a is _MISSING or b is _MISSING:
        return a is b
    return same(a, b)  # type: ignore[arg-type]


def same(a: JSON, b: JSON) -> bool:
    """Equal as JSON: ``1``, ``1.0`` and ``True`` are three different values here."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        assert isinstance(b, dict)
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        assert isinstance(b, list)
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    return a == b
