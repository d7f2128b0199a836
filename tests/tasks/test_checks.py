"""The backend's system checks, and ``manage.py check`` with Millrace as the default
``TASKS`` backend."""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.tasks import task_backends
from django.tasks.checks import check_tasks
from django.test import override_settings

from millrace_django import Retry
from tests.tasks.settings_values import BACKEND, TASKS

SAMPLE_TASKS = {"default": {"BACKEND": BACKEND, "QUEUES": ["default", "emails", "reports"]}}
"""What the sample project's settings need (see docs/django-tasks.md)."""


def ids(tasks: dict[str, Any], **overrides: Any) -> list[str]:
    with override_settings(TASKS=tasks, **overrides):
        return [message.id or "" for message in task_backends["default"].check()]


@pytest.mark.django_db(databases="__all__")  # the checks look at every database
def test_the_sample_project_passes_the_system_checks_with_millrace_as_default() -> None:
    # DEBUG as the sample project runs (pytest-django turns it off)
    with override_settings(TASKS={"default": {"BACKEND": BACKEND}}, DEBUG=True):
        assert list(check_tasks()) == []
        call_command("check", stdout=StringIO())  # raises SystemCheckError on any error
    out = StringIO()
    with override_settings(TASKS=SAMPLE_TASKS, DEBUG=True):
        assert list(check_tasks()) == []
        call_command("check", "--fail-level=WARNING", stdout=out)
    assert "no issues" in out.getvalue()


def test_a_good_configuration_has_no_problems() -> None:
    assert ids(TASKS) == []
    assert ids({"default": {**TASKS["default"], "OPTIONS": {"RETRY": Retry.none()}}}) == []


def test_the_app_must_be_installed() -> None:
    from django.conf import settings

    apps = [app for app in settings.INSTALLED_APPS if app != "millrace_django"]
    with override_settings(INSTALLED_APPS=apps):
        assert ids(TASKS) == ["millrace.E101"]


def test_queues_no_worker_serves_are_errors() -> None:
    tasks = {"default": {"BACKEND": BACKEND, "QUEUES": ["default", "ghosts"]}}
    with override_settings(TASKS=tasks):
        (message,) = task_backends["default"].check()
    assert message.id == "millrace.E102"
    assert "'ghosts'" in message.msg
    assert message.is_serious()


def test_a_storage_whose_results_stay_in_one_process_is_a_warning() -> None:
    assert ids(TASKS, MILLRACE={"STORAGE": "memory", "QUEUES": TASKS["default"]["QUEUES"]}) == [
        "millrace.W101"
    ]


@pytest.mark.parametrize(
    "options",
    [{"RETRY": 3}, {"RETRIES": Retry.none()}, {"RETRY": Retry.none(), "MAX_ATTEMPTS": 2}],
)
def test_bad_options_are_errors(options: dict[str, Any]) -> None:
    assert ids({"default": {**TASKS["default"], "OPTIONS": options}}) == ["millrace.E103"]
