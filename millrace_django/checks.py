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
        parse_settings(getattr(settings, "MILLRACE", None), settings.DATABASES.keys())
    except InvalidSettings as invalid:
        return [Error(p.message, hint=p.hint, id=p.id) for p in invalid.problems]
    return []
