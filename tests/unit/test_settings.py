"""``settings.MILLRACE`` is validated once, and every mistake is a system-check error."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.core.checks import Error

from millrace_django import assembly
from millrace_django.checks import check_settings
from millrace_django.conf import InvalidSettings, get_settings, parse_settings
from millrace_django.engine.retry import Retry


def _errors(settings: Any, value: Any) -> list[Error]:
    settings.MILLRACE = value
    return [m for m in check_settings() if isinstance(m, Error)]


def test_no_setting_at_all_gives_the_documented_defaults(settings: Any) -> None:
    del settings.MILLRACE
    get_settings.cache_clear()  # pytest-django's delattr sends no setting_changed
    parsed = get_settings()
    assert parsed.queues == {"default"}
    assert parsed.lease == timedelta(minutes=5)
    assert parsed.heartbeat == timedelta(minutes=1)
    assert (parsed.poll_min, parsed.poll_max) == (timedelta(seconds=0.2), timedelta(seconds=5))
    assert parsed.claim_batch == 64
    assert parsed.async_concurrency == 500
    assert parsed.interruption_limit == 10
    assert parsed.default_retry == Retry.exponential(5)
    assert parsed.worker_retention == timedelta(days=1)
    assert parsed.max_arguments_bytes == 1024 * 1024


def test_numbers_are_read_as_seconds(settings: Any) -> None:
    settings.MILLRACE = {"LEASE": 600, "HEARTBEAT": 30.5, "QUEUES": ["default", "emails"]}
    parsed = get_settings()
    assert parsed.lease == timedelta(minutes=10)
    assert parsed.heartbeat == timedelta(seconds=30.5)
    assert parsed.queues == {"default", "emails"}


def test_the_arguments_limit_is_the_clients(settings: Any) -> None:
    settings.MILLRACE = {"MAX_ARGUMENTS_BYTES": 4096}
    assert get_settings().max_arguments_bytes == 4096
    assert assembly.client().config.max_arguments_bytes == 4096


def test_overriding_the_setting_is_seen_at_once(settings: Any) -> None:
    settings.MILLRACE = {"CONCURRENCY": 3}
    assert get_settings().concurrency == 3
    settings.MILLRACE = {"CONCURRENCY": 5}
    assert get_settings().concurrency == 5


def test_a_lease_not_longer_than_the_heartbeat_is_an_error_with_a_hint(settings: Any) -> None:
    (error,) = _errors(settings, {"LEASE": 60, "HEARTBEAT": 60})
    assert error.id == "millrace.E004"
    assert "HEARTBEAT" in error.msg
    assert error.hint and "lease" in error.hint.lower()


def test_a_worker_retention_not_longer_than_the_lease_is_an_error_with_a_hint(
    settings: Any,
) -> None:
    (error,) = _errors(settings, {"LEASE": 600, "WORKER_RETENTION": 600})
    assert error.id == "millrace.E009"
    assert "LEASE" in error.msg
    assert error.hint and "1 day" in error.hint
    assert _errors(settings, {"LEASE": 600, "WORKER_RETENTION": 601}) == []
    assert get_settings().worker_retention == timedelta(seconds=601)
    assert _errors(settings, {"WORKER_RETENTION": None}) == []
    assert get_settings().worker_retention is None


@pytest.mark.parametrize(
    ("value", "error_id"),
    [
        ({"LEASES": 10}, "millrace.E002"),
        ({"CONCURRENCY": 0}, "millrace.E003"),
        ({"CONCURRENCY": "8"}, "millrace.E003"),
        ({"ASYNC_CONCURRENCY": 0}, "millrace.E003"),
        ({"QUEUES": "default"}, "millrace.E003"),
        ({"QUEUES": []}, "millrace.E003"),
        ({"LEASE": -1}, "millrace.E003"),
        ({"WORKER_RETENTION": 0}, "millrace.E003"),
        ({"WORKER_RETENTION": "1d"}, "millrace.E003"),
        ({"STORAGE": "redis"}, "millrace.E003"),
        ({"DEFAULT_RETRY": {"kind": "fixed"}}, "millrace.E003"),
        ({"MAX_ARGUMENTS_BYTES": 0}, "millrace.E003"),
        ({"MAX_ARGUMENTS_BYTES": 1.5e6}, "millrace.E003"),
        ({"MAX_ARGUMENTS_BYTES": 256 * 1024 * 1024}, "millrace.E003"),
        ({"POLL_MIN": 2, "POLL_MAX": 1}, "millrace.E005"),
        ({"QUEUES": ["emails"]}, "millrace.E006"),
        ({"DATABASE": "jobs"}, "millrace.E007"),
        (["not", "a", "dict"], "millrace.E001"),
    ],
)
def test_each_invalid_value_is_reported_with_its_id(
    settings: Any, value: Any, error_id: str
) -> None:
    errors = _errors(settings, value)
    assert [e.id for e in errors] == [error_id]
    assert all(e.hint for e in errors)


def test_every_problem_is_reported_not_just_the_first() -> None:
    with pytest.raises(InvalidSettings) as raised:
        parse_settings({"CONCURRENCY": 0, "CLAIM_BATCH": -1, "TYPO": 1})
    assert len(raised.value.problems) == 3


def test_a_valid_configuration_passes_the_check(settings: Any) -> None:
    assert _errors(settings, {"QUEUES": ["default", "emails"], "LEASE": 300}) == []
