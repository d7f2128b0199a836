"""On SQLite the lease must cover a heartbeat plus the busy timeout: a lease renewal (or
a completion) may wait that long for the single writer lock, and a lease ending
meanwhile lets another worker run the job again. A system check refuses shorter ones."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.checks import Error
from django.db import connections

from millrace_django.checks import check_settings


def _errors(settings: Any, value: dict[str, Any]) -> list[Error]:
    settings.MILLRACE = value
    return [m for m in check_settings() if isinstance(m, Error)]


@pytest.fixture
def sqlite_options(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The ``OPTIONS`` of the default (SQLite) database, restored after the test."""
    assert connections["default"].vendor == "sqlite"
    options: dict[str, Any] = connections["default"].settings_dict["OPTIONS"]
    monkeypatch.setitem(options, "timeout", options.get("timeout", 5))
    return options


def test_a_lease_not_covering_a_heartbeat_and_the_busy_timeout_is_an_error_on_sqlite(
    settings: Any, sqlite_options: dict[str, Any]
) -> None:
    sqlite_options["timeout"] = 30
    (error,) = _errors(settings, {"LEASE": 30, "HEARTBEAT": 1})
    assert error.id == "millrace.E010"
    assert "OPTIONS['timeout'], 0:00:30" in error.msg and "writer lock" in (error.hint or "")
    assert _errors(settings, {"LEASE": 32, "HEARTBEAT": 1}) == []


def test_without_a_timeout_option_sqlites_five_second_default_counts(
    settings: Any, sqlite_options: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delitem(sqlite_options, "timeout")
    assert [e.id for e in _errors(settings, {"LEASE": 6, "HEARTBEAT": 1})] == ["millrace.E010"]
    assert _errors(settings, {"LEASE": 7, "HEARTBEAT": 1}) == []


def test_the_sample_projects_settings_pass(settings: Any) -> None:
    assert _errors(settings, settings.MILLRACE) == []
