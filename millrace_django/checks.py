"""System checks: a bad ``MILLRACE`` setting fails ``manage.py check`` with an id and hint."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.apps import AppConfig
from django.conf import settings
from django.core.checks import CheckMessage, Error, register

from millrace_django.conf import InvalidSettings, parse_settings


@register("millrace")
def check_settings(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    try:
        parsed = parse_settings(getattr(settings, "MILLRACE", None), settings.DATABASES.keys())
    except InvalidSettings as invalid:
        return [Error(p.message, hint=p.hint, id=p.id) for p in invalid.problems]
    if parsed.storage != "orm":
        return []
    from millrace_django.storage.orm import configuration_problems

    return [
        Error(
            problem,
            hint="See docs/storage.md, 'Settings each vendor needs'.",
            id="millrace.E008",
        )
        for problem in configuration_problems(parsed.database)
    ]
