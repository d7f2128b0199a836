"""Job tags: a few short labels stored with a job, to find and group its jobs by.

A tag is checked where it enters (``@job``, ``using``, the dashboard's and the API's
filters), so a provider stores and indexes what it is given: at most :data:`MAX_TAGS`
per job, each 1 to :data:`MAX_TAG_LENGTH` characters of letters, digits and ``_ - . :``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

MAX_TAGS = 8
"""Tags one job may carry."""
MAX_TAG_LENGTH = 64
"""The longest tag (it is an index key on every database)."""
_TAG = re.compile(r"[A-Za-z0-9_.:-]+")


def tag_of(value: object) -> str:
    """``value`` if it is a well-formed tag; ``ValueError`` (``TypeError``) saying why not."""
    if not isinstance(value, str):
        raise TypeError(f"a tag must be a string; got {value!r}")
    if not 1 <= len(value) <= MAX_TAG_LENGTH:
        raise ValueError(f"a tag must be 1 to {MAX_TAG_LENGTH} characters; got {value!r}")
    if _TAG.fullmatch(value) is None:
        raise ValueError(f"a tag may hold letters, digits and _ - . : only (ASCII); got {value!r}")
    return value


def tags_of(values: Iterable[object]) -> tuple[str, ...]:
    """``values`` as a job's tags: each checked by :func:`tag_of`, duplicates dropped,
    sorted (so equal sets of tags are stored alike), at most :data:`MAX_TAGS`."""
    if isinstance(values, str | bytes) or not isinstance(values, Iterable):
        raise TypeError(f"tags must be a list of strings; got {values!r}")
    tags = tuple(sorted({tag_of(value) for value in values}))
    if len(tags) > MAX_TAGS:
        raise ValueError(f"a job carries at most {MAX_TAGS} tags; got {len(tags)}")
    return tags
