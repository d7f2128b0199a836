"""Retry policies: shapes, validation and the backoff arithmetic."""

from __future__ import annotations

from datetime import timedelta

import pytest

from millrace_django.contract import RetryKind, RetrySpec
from millrace_django.engine import InvalidRetry, Retry, next_delay, validate_retry

S = timedelta(seconds=1)


def test_exponential_five_waits_5_10_20_40_seconds_then_gives_up() -> None:
    spec = Retry.exponential(5)
    delays = [next_delay(spec, failures) for failures in range(1, 6)]
    assert delays == [5 * S, 10 * S, 20 * S, 40 * S, None]


def test_max_attempts_counts_the_first_run_so_one_attempt_means_no_retry() -> None:
    assert next_delay(Retry.exponential(1), 1) is None
    assert next_delay(Retry.fixed(30 * S, 1), 1) is None


def test_no_retry_means_the_first_failure_is_final() -> None:
    spec = Retry.none()
    assert spec == RetrySpec(kind=RetryKind.NONE, max_attempts=1)
    assert next_delay(spec, 1) is None


def test_fixed_waits_the_same_delay_until_the_budget_is_spent() -> None:
    spec = Retry.fixed(30 * S, 3)
    assert spec.max_delay == 30 * S
    assert [next_delay(spec, n) for n in (1, 2, 3)] == [30 * S, 30 * S, None]


def test_exponential_backoff_is_capped_at_its_max() -> None:
    spec = Retry.exponential(100, base=timedelta(minutes=10), max=timedelta(hours=1))
    assert next_delay(spec, 3) == timedelta(minutes=40)
    assert next_delay(spec, 4) == timedelta(hours=1)
    assert next_delay(spec, 50) == timedelta(hours=1)


def test_huge_failure_counts_do_not_overflow() -> None:
    spec = Retry.exponential(10**9, max=timedelta.max)
    assert next_delay(spec, 10**8) == timedelta.max


def test_a_zero_base_never_waits() -> None:
    spec = Retry.exponential(4, base=timedelta(0))
    assert [next_delay(spec, n) for n in (1, 2, 3)] == [timedelta(0)] * 3


def test_equal_jitter_lands_between_half_and_all_of_the_delay() -> None:
    spec = Retry.exponential(5, jitter=True)
    assert next_delay(spec, 2, random=lambda: 0.0) == 5 * S
    assert next_delay(spec, 2, random=lambda: 0.5) == 7.5 * S
    assert next_delay(spec, 2, random=lambda: 0.999999) == timedelta(seconds=9.999995)


def test_jitter_does_not_revive_a_dead_job() -> None:
    assert next_delay(Retry.exponential(2, jitter=True), 2, random=lambda: 0.5) is None


@pytest.mark.parametrize(
    "build",
    [
        lambda: Retry.exponential(0),
        lambda: Retry.fixed(S, 0),
        lambda: Retry.fixed(-S, 3),
        lambda: Retry.exponential(3, base=-S),
        lambda: Retry.exponential(3, base=timedelta(hours=2), max=timedelta(hours=1)),
    ],
)
def test_impossible_policies_are_refused(build: object) -> None:
    with pytest.raises(InvalidRetry):
        build()  # type: ignore[operator]


def test_validation_also_checks_hand_made_specs() -> None:
    with pytest.raises(InvalidRetry, match="max_attempts"):
        validate_retry(RetrySpec(kind=RetryKind.FIXED, max_attempts=True))
    assert isinstance(InvalidRetry("x"), ValueError)
