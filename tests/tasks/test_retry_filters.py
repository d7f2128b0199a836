"""Retry filters on ``django.tasks`` tasks: ``retry_on=`` and ``give_up_on=`` as on
``@job``, the task signals' verdict agreeing with the stored one."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.tasks import TaskResultStatus
from django.tasks.exceptions import InvalidTask

from millrace_django.testing import JobRunner
from tests.tasks import tasks_under_test as t
from tests.tasks.conftest import Signals

RETRY_GAP = timedelta(milliseconds=100)  # QUICK_RETRY's delay


def test_give_up_on_makes_a_failure_final_at_once_and_the_signal_says_so(
    runner: JobRunner, signals: Signals
) -> None:
    result = t.always_fails.using(give_up_on=ValueError).enqueue("final")
    runner.run_until_idle(throw_on_failure=False)
    result.refresh()
    assert (result.status, result.attempts) == (TaskResultStatus.FAILED, 1)
    assert result.is_finished  # QUICK_RETRY had two more attempts
    assert signals.of(result.id)[-1] == ("finished", "FAILED")


def test_retry_on_retries_the_listed_exceptions_only(runner: JobRunner) -> None:
    retried = t.flaky.using(retry_on=t.FlakyError).enqueue(2)
    final = t.always_fails.using(retry_on=(KeyError, t.FlakyError)).enqueue("not listed")
    runner.run_until_idle(throw_on_failure=False)
    runner.advance(RETRY_GAP)
    runner.run_until_idle(throw_on_failure=False)
    retried.refresh()
    final.refresh()
    assert (retried.status, retried.attempts) == (TaskResultStatus.SUCCESSFUL, 2)
    assert (final.status, final.attempts) == (TaskResultStatus.FAILED, 1)


def test_get_result_rebuilds_the_task_with_its_filters(runner: JobRunner) -> None:
    configured = t.always_fails.using(retry_on=ConnectionError, give_up_on=(ConnectionResetError,))
    assert configured.retry_on == (ConnectionError,)  # one class is kept as a tuple
    result = configured.enqueue("x")
    rebuilt = t.always_fails.get_result(result.id).task
    assert (rebuilt.retry_on, rebuilt.give_up_on) == ((ConnectionError,), (ConnectionResetError,))
    assert rebuilt == configured


@pytest.mark.parametrize("option", ["retry_on", "give_up_on"])
@pytest.mark.parametrize("value", ["ValueError", (), (ValueError, 3), ValueError("x")])
def test_a_filter_that_is_not_exception_classes_is_refused(option: str, value: object) -> None:
    with pytest.raises(InvalidTask, match=option):
        t.add.using(**{option: value})
