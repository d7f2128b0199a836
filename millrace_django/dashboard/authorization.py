"""Who may see the dashboard and act on it: a policy, then a Django permission.

Two gates, both required, and a denial always answers **404** (exactly what an unknown
URL answers, so the dashboard's existence is not disclosed):

1. **The policy**, ``settings.MILLRACE_DASHBOARD["AUTHORIZE"]``: a callable (or its
   dotted path) taking the request and returning ``True`` to let it in. It runs on every
   page, action, API call and the OpenAPI schema. The built-in
   :func:`staff_with_permissions` lets in active staff users who hold any Millrace
   permission. Without a policy the dashboard is open to active staff while
   ``DEBUG`` is on, and closed otherwise (and ``manage.py check`` reports
   ``millrace.E201``).
2. **A permission** per page or action (:class:`Permission`): the Django model
   permissions of Millrace's models, which superusers hold implicitly. Seeing jobs needs
   ``view_job``; cancelling, running now and requeueing need ``change_job``; and so on.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cache
from typing import Any

from django.conf import settings as django_settings
from django.contrib.admin import AdminSite
from django.contrib.admin import site as default_admin_site
from django.core.signals import setting_changed
from django.dispatch import receiver
from django.http import Http404, HttpRequest
from django.utils.module_loading import import_string

SETTING = "MILLRACE_DASHBOARD"

type Policy = Callable[[HttpRequest], bool]


class Permission(StrEnum):
    """The Django permission each part of the dashboard needs."""

    VIEW_JOBS = "millrace_django.view_job"
    """The overview, queues, the jobs list and a job's detail (with its arguments)."""
    MANAGE_JOBS = "millrace_django.change_job"
    """Cancel, run now, requeue (one job or in bulk)."""
    VIEW_RECURRING = "millrace_django.view_recurring"
    MANAGE_RECURRING = "millrace_django.change_recurring"
    """Trigger, disable, enable, edit or delete a recurring definition."""
    VIEW_WORKFLOWS = "millrace_django.view_workflowinstance"
    """Workflow instances: list, detail with data, graph and position."""
    MANAGE_WORKFLOWS = "millrace_django.change_workflowinstance"
    """Recover (retry, skip, abandon) or cancel an instance, and send signals."""


def staff_with_permissions(request: HttpRequest) -> bool:
    """The built-in policy: an active staff user holding any Millrace permission (the
    admin's own rule for showing an app)."""
    user = getattr(request, "user", None)
    return bool(
        user is not None
        and user.is_active
        and user.is_staff
        and user.has_module_perms("millrace_django")
    )


def staff_users(request: HttpRequest) -> bool:
    """Any active staff user; the fallback while ``DEBUG`` is on and no policy is set."""
    user = getattr(request, "user", None)
    return bool(user is not None and user.is_active and user.is_staff)


@dataclass(frozen=True, slots=True)
class SettingProblem:
    id: str
    message: str
    hint: str


class InvalidDashboardSettings(ValueError):
    def __init__(self, problems: list[SettingProblem]) -> None:
        super().__init__("; ".join(f"{p.id}: {p.message}" for p in problems))
        self.problems = problems


@dataclass(frozen=True, slots=True)
class DashboardSettings:
    """``settings.MILLRACE_DASHBOARD``, validated."""

    authorize: Policy | None = None
    """The explicit policy, if one is configured."""
    admin_site: AdminSite = field(default_factory=lambda: default_admin_site)
    """Whose look, header and navigation the pages take. The admin's default site is
    lazy and stays unevaluated until a page renders, so a project without
    ``django.contrib.admin`` (which cannot mount the dashboard) runs everything else."""


_KEYS = ("AUTHORIZE", "ADMIN_SITE")


def parse_dashboard_settings(raw: Any) -> DashboardSettings:
    """Validate a ``MILLRACE_DASHBOARD`` dict; raise listing every problem."""
    if raw is None:
        return DashboardSettings()
    if not isinstance(raw, Mapping):
        raise InvalidDashboardSettings(
            [
                SettingProblem(
                    "millrace.E202",
                    f"{SETTING} must be a dict.",
                    f'{SETTING} = {{"AUTHORIZE": "myproject.auth.can_operate"}}',
                )
            ]
        )
    problems = [
        SettingProblem(
            "millrace.E202",
            f"{SETTING} has an unknown setting {key!r}.",
            f"Known settings: {', '.join(_KEYS)}.",
        )
        for key in raw
        if key not in _KEYS
    ]
    authorize: Policy | None = None
    if raw.get("AUTHORIZE") is not None:
        try:
            authorize = _callable(raw["AUTHORIZE"])
        except (ImportError, TypeError) as error:
            problems.append(
                SettingProblem(
                    "millrace.E203",
                    f"{SETTING}['AUTHORIZE'] is not a usable policy: {error}",
                    "Give a callable taking the request and returning a bool, or its dotted "
                    "path, e.g. 'millrace_django.dashboard.authorization."
                    "staff_with_permissions'.",
                )
            )
    site = default_admin_site
    if raw.get("ADMIN_SITE") is not None:
        try:
            site = _admin_site(raw["ADMIN_SITE"])
        except (ImportError, TypeError) as error:
            problems.append(
                SettingProblem(
                    "millrace.E202",
                    f"{SETTING}['ADMIN_SITE'] is not an admin site: {error}",
                    "Give an AdminSite instance or its dotted path, e.g. 'myproject.admin.site'.",
                )
            )
    if problems:
        raise InvalidDashboardSettings(problems)
    return DashboardSettings(authorize=authorize, admin_site=site)


def _callable(value: Any) -> Policy:
    found = import_string(value) if isinstance(value, str) else value
    if not callable(found):
        raise TypeError(f"{value!r} is not callable")
    policy: Policy = found
    return policy


def _admin_site(value: Any) -> AdminSite:
    found = import_string(value) if isinstance(value, str) else value
    if not isinstance(found, AdminSite):
        raise TypeError(f"{value!r} is not an AdminSite")
    return found


@cache
def get_dashboard_settings() -> DashboardSettings:
    """The project's dashboard settings; an invalid setting closes the dashboard (the
    system checks say why)."""
    try:
        return parse_dashboard_settings(getattr(django_settings, SETTING, None))
    except InvalidDashboardSettings:
        return DashboardSettings(authorize=_deny_all)


def _deny_all(request: HttpRequest) -> bool:
    return False


@receiver(setting_changed)
def _forget(*, setting: str, **kwargs: object) -> None:
    if setting == SETTING:
        get_dashboard_settings.cache_clear()


def effective_policy() -> Policy | None:
    """The configured policy; without one, :func:`staff_users` while ``DEBUG`` is on,
    else ``None`` (everything is denied)."""
    configured = get_dashboard_settings().authorize
    if configured is not None:
        return configured
    return staff_users if django_settings.DEBUG else None


_DECIDED = "_millrace_dashboard_authorized"


def authorized(request: HttpRequest) -> bool:
    """Whether the policy lets ``request`` in (decided once per request)."""
    decided = getattr(request, _DECIDED, None)
    if decided is None:
        policy = effective_policy()
        decided = policy is not None and bool(policy(request))
        setattr(request, _DECIDED, decided)
    return bool(decided)


def allowed(request: HttpRequest, permission: Permission) -> bool:
    """The policy lets ``request`` in and its user holds ``permission``."""
    user = getattr(request, "user", None)
    return authorized(request) and user is not None and bool(user.has_perm(permission.value))


def require(request: HttpRequest, permission: Permission) -> None:
    """Raise :class:`~django.http.Http404` unless :func:`allowed`: a denied request
    looks exactly like an unknown URL."""
    if not allowed(request, permission):
        raise Http404("not found")


def grants(request: HttpRequest) -> dict[str, bool]:
    """Which permissions ``request`` holds, by name, for templates (``can.MANAGE_JOBS``)."""
    return {permission.name: allowed(request, permission) for permission in Permission}
