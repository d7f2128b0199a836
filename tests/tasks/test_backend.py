"""MillraceBackend through Django's public Tasks API, run by the test job runner.

Every task is enqueued with ``task.enqueue``/``aenqueue`` and read back with
``result.refresh()``/``Task.get_result``; the :class:`~millrace_django.testing.JobRunner`
stands in for workers on this thread over memory storage, in fake time (it runs the
same code a worker does).
"""

from __future__ import annotations

import pickle
from datetime import datetime, timedelta
from typing import Any
from uuid import UUID, uuid4

import pytest
from asgiref.sync import async_to_sync
from django.tasks import TaskResultStatus, default_task_backend, task, task_backends
from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist, TaskResultMismatch
from django.test import override_settings

from millrace_django import Retry, job
from millrace_django.contract import JobState
from millrace_django.engine import JobCancelled, default_client
from millrace_django.tasks_backend import RUN_TASK_TARGET, MillraceBackend, MillraceTask
from millrace_django.testing import RUNNER_ID, JobRunner
from tests.tasks import tasks_under_test as t
from tests.tasks.conftest import Signals
from tests.tasks.settings_values import TASKS
from tests.tasks.tasks_under_test import QUICK_RETRY

RETRY_GAP = timedelta(milliseconds=100)  # QUICK_RETRY's delay


@job
def plain_job() -> str:
    return "not a task"


def test_the_backend_supports_everything_django_asks_about() -> None:
    backend = default_task_backend
    assert isinstance(task_backends["default"], MillraceBackend)
    assert backend.supports_defer
    assert backend.supports_async_task
    assert backend.supports_get_result
    assert backend.supports_priority
    assert isinstance(t.add, MillraceTask)


# -- success, failure, retries ------------------------------------------------------------


def test_a_task_succeeds_with_its_return_value(runner: JobRunner) -> None:
    result = t.add.enqueue(2, 3)
    assert UUID(result.id)  # the job's id, as a string
    assert result.status == TaskResultStatus.READY
    assert result.enqueued_at == runner.clock.now()
    assert (result.started_at, result.finished_at, result.worker_ids) == (None, None, [])
    with pytest.raises(ValueError, match="not finished yet"):
        _ = result.return_value

    assert runner.run_until_idle() == 1
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value == 5
    assert result.is_finished
    assert result.worker_ids == [RUNNER_ID]
    assert result.attempts == 1
    assert result.errors == []
    assert result.started_at == result.last_attempted_at == runner.clock.now()
    assert result.finished_at == runner.clock.now()

    fetched = t.add.get_result(result.id)
    assert fetched.task.func is t.add.func
    assert (fetched.args, fetched.kwargs, fetched.return_value) == ([2, 3], {}, 5)
    assert fetched.backend == "default"


def test_keyword_arguments_queue_and_json_return_values_round_trip(runner: JobRunner) -> None:
    result = t.shout.enqueue("hi", times=2)
    runner.run_until_idle()
    fetched = t.shout.get_result(result.id)
    assert fetched.kwargs == {"times": 2}
    assert fetched.task.queue_name == "emails"
    assert fetched.return_value == {"text": "HIHI", "parts": ["hi", 2]}


def test_a_failing_task_retries_then_fails_with_one_task_error_per_attempt(
    runner: JobRunner,
) -> None:
    result = t.always_fails.enqueue("boom")
    runner.run_until_idle(throw_on_failure=False)
    result.refresh()
    assert result.status == TaskResultStatus.READY  # its retry is waiting
    assert (result.attempts, len(result.errors), result.finished_at) == (1, 1, None)
    with pytest.raises(ValueError, match="not finished yet"):
        _ = result.return_value

    for _ in range(2):
        runner.advance(RETRY_GAP)
        runner.run_until_idle(throw_on_failure=False)
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert result.is_finished
    assert result.finished_at == runner.clock.now()
    assert result.worker_ids == [RUNNER_ID] * 3
    assert len(result.errors) == 3
    for error in result.errors:
        assert error.exception_class_path == "builtins.ValueError"
        assert error.exception_class is ValueError
        assert "ValueError: boom" in error.traceback
        assert "always_fails" in error.traceback
    assert result.started_at is not None and result.last_attempted_at is not None
    assert result.last_attempted_at - result.started_at == 2 * RETRY_GAP
    with pytest.raises(ValueError, match="Task failed"):
        _ = result.return_value


def test_a_flaky_task_succeeds_on_a_retry_and_its_context_counts_attempts(
    runner: JobRunner,
) -> None:
    result = t.flaky.enqueue(3)
    runner.run_until_idle(throw_on_failure=False)
    for _ in range(2):
        runner.advance(RETRY_GAP)
        runner.run_until_idle(throw_on_failure=False)
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.attempts == 3
    assert [e.exception_class_path for e in result.errors] == [
        "tests.tasks.tasks_under_test.FlakyError"
    ] * 2
    assert result.errors[0].exception_class is t.FlakyError
    seen = result.return_value
    assert seen["attempt"] == 3
    assert seen["status"] == "RUNNING"
    assert seen["worker_ids"] == [RUNNER_ID] * 3
    assert seen["errors"] == ["tests.tasks.tasks_under_test.FlakyError"] * 2


def test_an_error_is_named_by_the_class_the_task_raised_not_by_its_traceback_text(
    runner: JobRunner,
) -> None:
    result = t.always_fails.using(max_attempts=1).enqueue("first line\nsecond line")
    runner.run_until_idle(throw_on_failure=False)
    (error,) = t.always_fails.get_result(result.id).errors
    assert error.traceback.endswith("ValueError: first line\nsecond line\n")
    assert error.exception_class_path == "builtins.ValueError"  # the text's last line is not


def test_max_attempts_caps_the_runs(runner: JobRunner) -> None:
    once = t.always_fails.using(max_attempts=1)
    assert once.retry == QUICK_RETRY  # using() keeps the other options
    result = once.enqueue("only once")
    runner.run_until_idle(throw_on_failure=False)
    result.refresh()
    assert (result.status, result.attempts, len(result.errors)) == (TaskResultStatus.FAILED, 1, 1)

    twice = t.always_fails.using(max_attempts=2).enqueue("twice")
    runner.run_until_idle(throw_on_failure=False)
    runner.advance(RETRY_GAP)
    runner.run_until_idle(throw_on_failure=False)
    twice.refresh()
    assert (twice.status, twice.attempts) == (TaskResultStatus.FAILED, 2)
    assert t.always_fails.get_result(twice.id).task.max_attempts == 2


def test_the_backends_retry_option_is_the_default_policy_of_its_tasks(
    runner: JobRunner,
) -> None:
    no_retries = {"default": {**TASKS["default"], "OPTIONS": {"RETRY": Retry.none()}}}
    with override_settings(TASKS=no_retries):
        result = t.add.enqueue("a", 1)  # raises TypeError when it runs
        runner.run_until_idle(throw_on_failure=False)
        result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert [e.exception_class_path for e in result.errors] == ["builtins.TypeError"]


def test_a_return_value_json_cannot_store_fails_the_attempt(runner: JobRunner) -> None:
    result = t.returns_a_set.using(max_attempts=1).enqueue()
    runner.run_until_idle(throw_on_failure=False)
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert result.errors[0].exception_class is TypeError


def test_a_cancelled_task_is_failed_with_job_cancelled(runner: JobRunner) -> None:
    result = t.add.enqueue(1, 2)
    assert default_client().cancel(UUID(result.id))  # Millrace's API; Django has none
    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert [e.exception_class for e in result.errors] == [JobCancelled]
    assert result.finished_at == runner.clock.now()
    assert result.worker_ids == []


# -- ordering and deferral ----------------------------------------------------------------


def test_higher_priority_runs_first(runner: JobRunner) -> None:
    t.RUN_ORDER.clear()
    t.stamp.using(priority=-5).enqueue("low")
    t.stamp.enqueue("normal")
    high = t.stamp.using(priority=50).enqueue("high")
    t.stamp.using(priority=-100).enqueue("lowest")
    runner.run_until_idle()
    assert t.RUN_ORDER == ["high", "normal", "low", "lowest"]
    assert t.stamp.get_result(high.id).task.priority == 50


def test_run_after_defers_a_task_until_then(runner: JobRunner) -> None:
    t.RUN_ORDER.clear()
    later = runner.clock.now() + timedelta(hours=1)
    result = t.stamp.using(run_after=later).enqueue("later")
    assert result.task.run_after == later
    assert runner.run_until_idle() == 0
    result.refresh()
    assert result.status == TaskResultStatus.READY
    assert t.stamp.get_result(result.id).task.run_after == later

    runner.advance(timedelta(minutes=59))
    assert runner.run_until_idle() == 0
    runner.advance(timedelta(minutes=1))
    assert runner.run_until_idle() == 1
    result.refresh()
    assert result.status == TaskResultStatus.SUCCESSFUL
    assert result.started_at is not None and result.started_at >= later


def test_a_run_after_in_the_past_runs_at_once(runner: JobRunner) -> None:
    result = t.stamp.using(run_after=runner.clock.now() - timedelta(days=1)).enqueue("now")
    assert runner.run_until_idle() == 1
    result.refresh()
    assert result.return_value == "now"


# -- async, context -------------------------------------------------------------------------


def test_async_tasks_enqueue_run_and_refresh_from_async_code(runner: JobRunner) -> None:
    async def enqueue() -> Any:
        return await t.async_double.aenqueue(21)

    result = async_to_sync(enqueue)()
    assert result.status == TaskResultStatus.READY
    runner.run_until_idle()

    async def refresh() -> Any:
        await result.arefresh()
        return await t.async_double.aget_result(result.id)

    fetched = async_to_sync(refresh)()
    assert result.status == fetched.status == TaskResultStatus.SUCCESSFUL
    assert result.return_value["double"] == 42
    assert result.return_value["id"] == result.id
    assert fetched.task.func is t.async_double.func


def test_a_task_taking_context_sees_its_own_result(runner: JobRunner) -> None:
    result = t.introspect.enqueue()
    runner.run_until_idle()
    seen = t.introspect.get_result(result.id).return_value
    assert seen == {
        "attempt": 1,
        "id": result.id,
        "status": "RUNNING",
        "worker_ids": [RUNNER_ID],
        "errors": [],
        "started": runner.clock.now().isoformat(),
        "task": "tests.tasks.tasks_under_test.introspect",
    }


# -- signals ----------------------------------------------------------------------------------


def test_signals_follow_a_successful_task(runner: JobRunner, signals: Signals) -> None:
    result = t.add.enqueue(1, 1)
    assert signals.of(result.id) == [("enqueued", "READY")]
    runner.run_until_idle()
    assert signals.of(result.id) == [
        ("enqueued", "READY"),
        ("started", "RUNNING"),
        ("finished", "SUCCESSFUL"),
    ]
    assert {s.sender for s in signals.sent} == {MillraceBackend}
    assert all(s.handling is None for s in signals.sent)


def test_signals_follow_each_attempt_of_a_failing_task(runner: JobRunner, signals: Signals) -> None:
    result = t.always_fails.using(max_attempts=2).enqueue("x")
    runner.run_until_idle(throw_on_failure=False)
    runner.advance(RETRY_GAP)
    runner.run_until_idle(throw_on_failure=False)
    assert signals.of(result.id) == [
        ("enqueued", "READY"),
        ("started", "RUNNING"),
        ("finished", "READY"),  # a retry follows
        ("started", "RUNNING"),
        ("finished", "FAILED"),
    ]
    finished = [s for s in signals.sent if s.signal == "finished"]
    assert [(s.attempts, s.errors) for s in finished] == [(1, 1), (2, 2)]
    # sent while the exception is handled, so Django's logging receiver logs it
    assert all(s.handling is ValueError for s in finished)


# -- results that do not exist ---------------------------------------------------------------


def test_unknown_ids_raise_task_result_does_not_exist(runner: JobRunner) -> None:
    for unknown in ("not-a-uuid", str(uuid4()), ""):
        with pytest.raises(TaskResultDoesNotExist):
            t.add.get_result(unknown)
    job_id = plain_job.enqueue()  # an ordinary job is not a task result
    with pytest.raises(TaskResultDoesNotExist):
        default_task_backend.get_result(str(job_id))


def test_another_tasks_id_is_a_mismatch(runner: JobRunner) -> None:
    result = t.add.enqueue(1, 2)
    with pytest.raises(TaskResultMismatch):
        t.shout.get_result(result.id)


def test_a_result_of_another_alias_is_not_found(runner: JobRunner) -> None:
    two = {**TASKS, "other": TASKS["default"]}
    with override_settings(TASKS=two):
        result = t.add.using(backend="other").enqueue(1, 2)
        assert task_backends["other"].get_result(result.id).backend == "other"
        with pytest.raises(TaskResultDoesNotExist):
            task_backends["default"].get_result(result.id)


# -- options ---------------------------------------------------------------------------------


def test_options_survive_using_and_the_round_trip(runner: JobRunner) -> None:
    configured = t.always_fails.using(priority=7, timeout=30, idempotency_key="nightly")
    assert isinstance(configured, MillraceTask)
    assert configured.timeout == timedelta(seconds=30)
    assert (configured.retry, configured.priority) == (QUICK_RETRY, 7)
    result = configured.enqueue("x")
    stored = runner.get(UUID(result.id))
    assert stored.invocation.target == RUN_TASK_TARGET
    assert (stored.priority, stored.timeout) == (7, timedelta(seconds=30))
    assert stored.retry == QUICK_RETRY
    assert stored.idempotency_key == "nightly"
    fetched = t.always_fails.get_result(result.id).task
    assert isinstance(fetched, MillraceTask)
    assert (fetched.priority, fetched.timeout, fetched.idempotency_key) == (
        7,
        timedelta(seconds=30),
        "nightly",
    )
    assert fetched.func is t.always_fails.func


def test_a_fetched_result_equals_the_enqueued_one_with_the_options_as_declared(
    runner: JobRunner,
) -> None:
    later = runner.clock.now() + timedelta(hours=1)
    for declared, args in (
        (t.add, (1, 2)),  # no Millrace option: the job's resolved policy must not show
        (t.always_fails.using(max_attempts=2, priority=3), ("x",)),  # retry, max_attempts
        (t.once.using(timeout=30, idempotency_key="k", run_after=later), ("x",)),
        (t.add.using(retry=Retry.none(), max_attempts=4), (1, 2)),  # over no retries
    ):
        result = declared.enqueue(*args)
        fetched = default_task_backend.get_result(result.id)
        assert fetched.task == declared
        assert fetched == result


def test_an_idempotency_key_returns_the_waiting_task_instead_of_a_second(
    runner: JobRunner, signals: Signals
) -> None:
    keyed = t.once.using(idempotency_key="report-2026-11")
    first = keyed.enqueue("first")
    again = keyed.enqueue("second")
    assert again.id == first.id
    assert again.args == ["first"]
    assert [s.signal for s in signals.sent] == ["enqueued"]  # nothing new was stored
    runner.run_until_idle()
    third = keyed.enqueue("third")  # the key is free once the first one finished
    assert third.id != first.id


def test_invalid_options_are_refused_when_the_task_is_defined() -> None:
    for options in (
        {"max_attempts": 0},
        {"max_attempts": True},
        {"retry": 3},
        {"timeout": -1},
        {"timeout": "soon"},
        {"idempotency_key": " "},
    ):
        with pytest.raises(InvalidTask):
            task(**options)(t.add.func)
    with pytest.raises(TypeError, match="run_after"):
        task(run_after=datetime.now())(t.add.func)
    with pytest.raises(InvalidTask, match="aware"):
        t.add.using(run_after=datetime(2030, 1, 1))


def test_a_queue_no_worker_serves_is_refused_at_enqueue(runner: JobRunner) -> None:
    anywhere = {"default": {**TASKS["default"], "QUEUES": []}}
    with override_settings(TASKS=anywhere), pytest.raises(InvalidTask, match="nowhere"):
        t.add.using(queue_name="nowhere").enqueue(1, 2)
    assert runner.jobs() == []


def test_arguments_that_do_not_fit_or_survive_json_are_refused_at_enqueue(
    runner: JobRunner,
) -> None:
    with pytest.raises(TypeError, match="missing a required argument"):
        t.add.enqueue(1)
    with pytest.raises(TypeError):
        t.add.enqueue(datetime.now(), 1)
    with pytest.raises(TypeError):
        t.add.enqueue(float("nan"), 1)
    assert runner.jobs() == []


def test_results_and_tasks_pickle(runner: JobRunner) -> None:
    result = t.always_fails.using(priority=3, max_attempts=2).enqueue("x")
    copy = pickle.loads(pickle.dumps(result))
    assert copy.id == result.id
    assert copy.task == result.task
    assert copy.task.func is t.always_fails.func


def test_the_job_behind_a_task_is_an_ordinary_job(runner: JobRunner) -> None:
    result = t.add.enqueue(4, 5)
    runner.run_until_idle()
    (stored,) = runner.jobs()
    assert str(stored.id) == result.id
    assert stored.state is JobState.SUCCEEDED
    assert stored.result == 9
    assert stored.invocation.target == "millrace_django.tasks_backend:run_task"
    assert stored.invocation.kwargs["task_path"] == "tests.tasks.tasks_under_test.add"
    assert default_client() is runner.client
