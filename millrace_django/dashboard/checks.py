"""System checks of the dashboard: fail at start-up, not on the first request.

- ``millrace.E201``: the dashboard (or its API) is mounted, ``DEBUG`` is off, and no
  authorization policy is configured (``MILLRACE_DASHBOARD["AUTHORIZE"]``).
- ``millrace.E202``: ``MILLRACE_DASHBOARD`` is not a dict, has an unknown key, or names
  an admin site that is not one.
- ``millrace.E203``: the policy cannot be imported or is not callable.
- ``millrace.E204``: the dashboard is mounted but the configured storage has no
  monitoring read model.
- ``millrace.E205``: the dashboard is mounted but ``django.contrib.admin``, whose
  login, look and templates its pages use, is not installed.

A project that does not mount the dashboard (one without the admin, or a settings
module for workers without ``ROOT_URLCONF``) gets none of the mount's checks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.apps import AppConfig, apps
from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, register
from django.urls import NoReverseMatch, reverse

from millrace_django.dashboard.authorization import (
    SETTING,
    InvalidDashboardSettings,
    parse_dashboard_settings,
)


def dashboard_mounted() -> bool:
    """Whether the project's URLconf includes the dashboard's URLs (``False`` without
    a URLconf)."""
    if getattr(settings, "ROOT_URLCONF", None) is None:
        return False
    try:
        reverse("millrace_dashboard:overview")
    except NoReverseMatch:
        return False
    return True


@register(Tags.security, Tags.urls)
def check_dashboard(
    app_configs: Sequence[AppConfig] | None = None, **kwargs: Any
) -> list[CheckMessage]:
    try:
        parsed = parse_dashboard_settings(getattr(settings, SETTING, None))
    except InvalidDashboardSettings as invalid:
        return [Error(p.message, hint=p.hint, id=p.id) for p in invalid.problems]
    if not dashboard_mounted():
        return []
    problems: list[CheckMessage] = []
    if parsed.authorize is None and not settings.DEBUG:
        problems.append(
            Error(
                "The Millrace dashboard is mounted without an authorization policy while "
                "DEBUG is off; it would answer every request with 404.",
                hint=f'Set {SETTING} = {{"AUTHORIZE": "millrace_django.dashboard.'
                'authorization.staff_with_permissions"}, or a callable of your own taking '
                "the request and returning a bool. See docs/dashboard.md.",
                id="millrace.E201",
            )
        )
    storage_problem = _storage_problem()
    if storage_problem is not None:
        problems.append(storage_problem)
    if not apps.is_installed("django.contrib.admin"):
        problems.append(
            Error(
                "The Millrace dashboard is mounted, but django.contrib.admin is not "
                "installed; its pages use the admin's login, look and templates.",
                hint='Add "django.contrib.admin" to INSTALLED_APPS (with its dependencies: '
                "auth, contenttypes, sessions, messages), or remove the dashboard's URLs.",
                id="millrace.E205",
            )
        )
    return problems


def _storage_problem() -> Error | None:
    from django.core.exceptions import ImproperlyConfigured

    from millrace_django import assembly
    from millrace_django.conf import InvalidSettings
    from millrace_django.contract import MonitoringStorage

    try:
        storage = assembly.storage()
    except (InvalidSettings, ImproperlyConfigured, ValueError):
        return None  # the settings checks report this
    if isinstance(storage, MonitoringStorage):
        return None
    return Error(
        f"The Millrace dashboard is mounted, but the storage {type(storage).__name__} has "
        "no monitoring read model.",
        hint="Use a provider that implements MonitoringStorage (the built-in ones do), or "
        "unmount the dashboard.",
        id="millrace.E204",
    )
