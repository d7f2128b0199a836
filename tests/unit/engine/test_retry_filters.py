"""Retry filters: ``retry_on=`` and ``give_up_on=`` decide which failures may be retried."""

from __future__ import annotations

from datetime import timedelta

import pytest

from millrace_django.clock import FakeClock
from millrace_django.contract import JobState, RetrySpec
from millrace_django.engine import (
    EngineSettings,
    InvalidRetry,
    JobClient,
    JobTimedOut,
    Retry,
    job,
    outcomes,
)
from millrace_django.engine.errors import FailedInChild, HardTimeoutExceeded
from millrace_django.engine.retry import gives_up
from millrace_django.storage.memory import MemoryStorage
from tests.unit.engine.helpers import claim


class GatewayBusy(ConnectionError):
    """A subclass: filters match an exception's bases too."""


@job(retry=Retry.fixed(timedelta(seconds=1), 5), retry_on=ConnectionError, give_up_on=ValueError)
def charge(order_id: str) -> None:
    raise NotImplementedError


@job(retry=Retry.fixed(timedelta(seconds=1), 5))
def unfiltered() -> None:
    raise NotImplementedError


BUILTIN_OS = ("builtins.OSError", "builtins.Exception", "builtins.BaseException", "builtins.object")
FILE_NOT_FOUND = ("builtins.FileNotFoundError", *BUILTIN_OS)


def test_without_filters_no_failure_is_final_by_its_class() -> None:
    assert not gives_up(RetrySpec(), FILE_NOT_FOUND)


def test_a_class_in_give_up_on_is_final_and_so_are_its_subclasses() -> None:
    spec = RetrySpec(give_up_on=("builtins.OSError",))
    assert gives_up(spec, FILE_NOT_FOUND)
    assert not gives_up(spec, ("builtins.ValueError", "builtins.Exception"))


def test_a_class_outside_retry_on_is_final() -> None:
    spec = RetrySpec(retry_on=("builtins.ConnectionError",))
    assert gives_up(spec, FILE_NOT_FOUND)
    assert not gives_up(spec, ("builtins.ConnectionError", *BUILTIN_OS))


def test_give_up_on_wins_over_retry_on() -> None:
    spec = RetrySpec(retry_on=("builtins.OSError",), give_up_on=("builtins.FileNotFoundError",))
    assert gives_up(spec, FILE_NOT_FOUND)
    assert not gives_up(spec, ("builtins.PermissionError", *BUILTIN_OS))


def test_a_failure_without_an_exception_is_left_to_the_budget() -> None:
    assert not gives_up(RetrySpec(retry_on=("builtins.ConnectionError",)), None)


def test_the_decorator_stores_the_filters_on_every_job_by_class_name(
    client: JobClient, storage: MemoryStorage
) -> None:
    charge.enqueue("o-1")
    retry = claim(storage).retry
    assert retry.retry_on == ("builtins.ConnectionError",)
    assert retry.give_up_on == ("builtins.ValueError",)
    assert (retry.max_attempts, retry.base_delay) == (5, timedelta(seconds=1))


def test_using_replaces_the_decorations_filters_and_keeps_the_others(
    client: JobClient, storage: MemoryStorage
) -> None:
    charge.using(give_up_on=(GatewayBusy, KeyError)).enqueue("o-2")
    retry = claim(storage).retry
    assert retry.retry_on == ("builtins.ConnectionError",)
    assert retry.give_up_on == (f"{__name__}.GatewayBusy", "builtins.KeyError")


def no_policy() -> None:
    raise NotImplementedError


def test_filters_apply_to_the_default_policy_too(
    client: JobClient, storage: MemoryStorage, config: EngineSettings
) -> None:
    config_default = job(retry_on=TimeoutError)(no_policy)
    config_default.enqueue()
    retry = claim(storage).retry
    assert retry.retry_on == ("builtins.TimeoutError",)
    assert retry.max_attempts == config.default_retry.max_attempts


@pytest.mark.parametrize(
    ("raised", "target"),
    [
        (ValueError("bad amount"), JobState.DEAD),
        (ConnectionError("reset"), JobState.FAILED),
        (GatewayBusy("busy"), JobState.FAILED),
        (KeyError("outside retry_on"), JobState.DEAD),
    ],
)
def test_a_failure_retries_only_when_the_filters_allow_it(
    client: JobClient,
    storage: MemoryStorage,
    clock: FakeClock,
    config: EngineSettings,
    raised: Exception,
    target: JobState,
) -> None:
    charge.enqueue("o-3")
    job_ = claim(storage)
    transition = outcomes.failed(job_, raised, clock=clock, config=config)
    assert (transition.target, transition.failures) == (target, 1)
    assert type(raised).__name__ in (transition.error or "")


def test_a_timeout_counts_as_job_timed_out_to_the_filters(
    client: JobClient, storage: MemoryStorage, clock: FakeClock, config: EngineSettings
) -> None:
    charge.enqueue("o-4")  # retry_on=ConnectionError: a timeout is outside it
    transition = outcomes.timed_out(
        claim(storage), timedelta(seconds=3), clock=clock, config=config
    )
    assert transition.target is JobState.DEAD
    unfiltered.using(give_up_on=JobTimedOut).enqueue()
    killed = outcomes.failed(
        claim(storage), HardTimeoutExceeded(timedelta(seconds=3)), clock=clock, config=config
    )
    assert killed.target is JobState.DEAD
    assert killed.error == "Killed after its hard timeout of 3 seconds."


def test_a_failure_in_the_child_process_is_filtered_by_the_class_names_it_sent(
    client: JobClient, storage: MemoryStorage, clock: FakeClock, config: EngineSettings
) -> None:
    charge.enqueue("o-5")
    job_ = claim(storage)
    sent = FailedInChild("Traceback ...\nValueError: bad amount\n", ("builtins.ValueError",))
    transition = outcomes.failed(job_, sent, clock=clock, config=config)
    assert transition.target is JobState.DEAD
    assert transition.error == "Traceback ...\nValueError: bad amount\n"


@pytest.mark.parametrize(
    "value", ["ValueError", (), (ValueError, "KeyError"), 42, object, [ValueError]]
)
def test_the_decorator_refuses_anything_but_exception_classes(value: object) -> None:
    with pytest.raises(InvalidRetry, match="retry_on"):
        job(retry_on=value)  # type: ignore[call-overload]
    with pytest.raises(InvalidRetry, match="give_up_on"):
        unfiltered.using(give_up_on=value)  # type: ignore[arg-type]
