"""Template filters of the dashboard's pages."""

from __future__ import annotations

from datetime import timedelta
from uuid import UUID

from django import template

from millrace_django.dashboard.naming import workflow_step

register = template.Library()
register.filter("workflow_step", workflow_step)

SHORT_ID_DIGITS = 12
"""Hex digits a list shows of an id: the last ones. Time-ordered ids (UUIDv7) share
their first digits for every id made within about a minute; the last twelve are random."""


@register.filter
def seconds(value: timedelta | None) -> str:
    """A run time as an operator reads it: ``0.25 s``, ``2.5 s``, ``2 min``, ``1 h``."""
    if value is None:
        return "—"
    total = value.total_seconds()
    if total >= 3600 and total % 3600 == 0:
        return f"{total / 3600:g} h"
    if total >= 60 and total % 60 == 0:
        return f"{total / 60:g} min"
    return f"{total:g} s"


@register.filter
def short_id(value: UUID | str) -> str:
    """The part of an id that tells it apart in a list (show the full id in a title)."""
    return str(value)[-SHORT_ID_DIGITS:]


def _lines(error: str | None) -> list[str]:
    return [line for line in (error or "").splitlines() if line.strip()]


@register.filter
def exception_line(error: str | None) -> str:
    """The last non-blank line of a stored error: a traceback's exception line."""
    lines = _lines(error)
    return lines[-1].strip() if lines else ""


@register.filter
def has_more_lines(error: str | None) -> bool:
    """Whether a stored error says more than its exception line (a traceback)."""
    return len(_lines(error)) > 1
