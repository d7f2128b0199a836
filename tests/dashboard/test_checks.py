"""The dashboard fails at start-up, not on the first request, when it is misconfigured."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from millrace_django.dashboard.checks import check_dashboard

REPO = Path(__file__).resolve().parents[2]


def ids(messages) -> list[str]:
    return [message.id for message in messages]


def test_mounting_the_dashboard_without_a_policy_outside_debug_is_an_error(settings):
    settings.MILLRACE_DASHBOARD = None
    settings.DEBUG = False
    [error] = check_dashboard()
    assert error.id == "millrace.E201"
    assert "staff_with_permissions" in error.hint


def test_an_explicit_policy_satisfies_the_check(settings):
    settings.DEBUG = False
    assert check_dashboard() == []


def test_debug_needs_no_policy(settings):
    settings.MILLRACE_DASHBOARD = None
    settings.DEBUG = True
    assert check_dashboard() == []


def test_an_unmounted_dashboard_needs_no_policy(settings):
    settings.MILLRACE_DASHBOARD = None
    settings.DEBUG = False
    settings.ROOT_URLCONF = "tests.dashboard.urls_without_dashboard"
    assert check_dashboard() == []


def test_unknown_keys_and_bad_policies_are_reported(settings):
    settings.MILLRACE_DASHBOARD = {"AUTHORISE": "x", "AUTHORIZE": "no.such.policy"}
    assert ids(check_dashboard()) == ["millrace.E202", "millrace.E203"]
    settings.MILLRACE_DASHBOARD = {"AUTHORIZE": 42}
    assert ids(check_dashboard()) == ["millrace.E203"]
    settings.MILLRACE_DASHBOARD = ["AUTHORIZE"]
    assert ids(check_dashboard()) == ["millrace.E202"]
    settings.MILLRACE_DASHBOARD = {"ADMIN_SITE": "django.contrib.admin.ModelAdmin"}
    assert ids(check_dashboard()) == ["millrace.E202"]


def test_manage_py_check_fails_without_a_policy_when_debug_is_off():
    environment = {
        **os.environ,
        "DJANGO_DEBUG": "0",
        "DJANGO_SETTINGS_MODULE": "testproject.settings",
    }
    done = subprocess.run(
        [sys.executable, "manage.py", "check"],
        cwd=REPO,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    assert "millrace.E201" in done.stderr
