"""Fixtures of the dashboard tests: an explicit policy, a seeded world in the test
database, and clients for an operator, a read-only viewer and outsiders."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client

from millrace_django.testing import JobRunner
from tests.dashboard.sample import World, runner_now, seed

POLICY = {"AUTHORIZE": "millrace_django.dashboard.authorization.staff_with_permissions"}
BASE = "/admin/millrace/"


@pytest.fixture(autouse=True)
def dashboard_policy(settings: pytest.FixtureRequest) -> None:
    settings.MILLRACE_DASHBOARD = POLICY  # type: ignore[attr-defined]


@pytest.fixture
def runner(db: None) -> Iterator[JobRunner]:
    runner = runner_now()
    with runner.installed():
        yield runner


@pytest.fixture
def postgres_runner(settings: pytest.FixtureRequest) -> Iterator[JobRunner]:
    """A runner whose storage is the ``postgres`` alias (a test marked for its database)."""
    settings.MILLRACE = {**settings.MILLRACE, "DATABASE": "postgres"}  # type: ignore[attr-defined]
    runner = runner_now()
    with runner.installed():
        yield runner


@pytest.fixture
def world(runner: JobRunner) -> World:
    return seed(runner)


def _user(
    username: str, *, staff: bool = True, superuser: bool = False, perms: tuple[str, ...] = ()
) -> User:
    user = User.objects.create_user(
        username, password="secret", is_staff=staff, is_superuser=superuser
    )
    for codename in perms:
        user.user_permissions.add(
            Permission.objects.get(content_type__app_label="millrace_django", codename=codename)
        )
    return user


@pytest.fixture
def operator(db: None) -> Client:
    """A superuser: every page and action."""
    client = Client()
    client.force_login(_user("operator", superuser=True))
    return client


@pytest.fixture
def viewer(db: None) -> Client:
    """Staff allowed to look at everything and to act on nothing."""
    client = Client()
    client.force_login(
        _user("viewer", perms=("view_job", "view_recurring", "view_workflowinstance"))
    )
    return client


@pytest.fixture
def staff_without_permissions(db: None) -> Client:
    client = Client()
    client.force_login(_user("plain-staff"))
    return client


@pytest.fixture
def csrf_operator(db: None) -> Client:
    """A superuser whose client enforces CSRF like a browser would."""
    client = Client(enforce_csrf_checks=True)
    client.force_login(_user("csrf-operator", superuser=True))
    return client
