"""Durable waits: bookmarks, signals with validated payloads, timeouts racing signals."""

from __future__ import annotations

import threading
from collections import Counter
from datetime import timedelta
from uuid import UUID

import pytest

from millrace_django.contract import InstanceState, JobState, JobStorage
from millrace_django.engine.workflow import (
    InvalidSignalPayload,
    Signal,
    WorkflowClient,
    WorkflowStepError,
    targets,
)
from millrace_django.storage.memory import MemoryStorage
from millrace_django.testing import JobRunner
from tests.unit.workflow import flows


def bookmarks(runner: JobRunner) -> int:
    storage = runner.storage
    assert isinstance(storage, MemoryStorage)
    return len(storage.tables.bookmarks)


def test_a_wait_as_the_very_first_step_parks_the_instance_at_start(
    runner: JobRunner, workflows: WorkflowClient
) -> None:
    instance_id = workflows.start(flows.WAIT_FIRST, {"order_id": "o-1"})
    runner.assert_instance(instance_id, InstanceState.SUSPENDED)
    assert runner.jobs() == []  # a waiting instance holds no job
    assert bookmarks(runner) == 1
    assert workflows.position(instance_id).waiting == ("sig1",)
    assert workflows.signal("approval", "o-1", flows.Approval(approved=True, by="ann"))
    (resume,) = runner.jobs()
    assert resume.invocation.target == targets.RESUME
    runner.run_until_idle()
    instance = runner.assert_instance(instance_id, InstanceState.COMPLETED)
    assert instance.data["approval"] == {"approved": True, "by": "ann", "note": None}
    assert instance.data["shipped"] is True
    assert bookmarks(runner) == 0


def test_a_signal_nobody_waits_for_returns_false(workflows: WorkflowClient) -> None:
    assert workflows.signal("approval", "o-1", {"approved": True, "by": "x"}) is False
    workflows.start(flows.WAIT_FIRST, {"order_id": "o-1"})
    assert workflows.signal("approval", "o-2", {"approved": True, "by": "x"}) is False
    assert workflows.signal("rejection", "o-1", {"approved": True, "by": "x"}) is False


def test_a_signal_resumes_exactly_one_instance_the_oldest(
    runner: JobRunner, workflows: WorkflowClient
) -> None:
    older = workflows.start(flows.WAIT_FIRST, {"order_id": "same"})
    runner.clock.advance(timedelta(seconds=1))
    newer = workflows.start(flows.WAIT_FIRST, {"order_id": "same"})
    payload = {"approved": False, "by": "bob"}
    assert workflows.signal("approval", "same", payload)
    runner.run_until_idle()
    runner.assert_instance(older, InstanceState.COMPLETED)
    runner.assert_instance(newer, InstanceState.SUSPENDED)
    assert flows.calls == ["cancel_order"]
    assert workflows.signal("approval", "same", payload)
    assert not workflows.signal("approval", "same", payload)
    runner.run_until_idle()
    runner.assert_instance(newer, InstanceState.COMPLETED)


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ({"approved": True}, "missing 'by'"),
        ({"approved": True, "by": "x", "extra": 1}, "no field 'extra'"),
        ({"approved": "yes", "by": "x"}, "field 'approved' of Approval must be bool"),
        ({"approved": True, "by": 3}, "field 'by' of Approval must be str"),
        ({"approved": True, "by": "x", "note": 4}, "field 'note'"),
        ("approved", "a JSON object"),
        ({"approved": True, "by": {1, 2}}, "must be JSON"),
        (flows.Order(order_id="x"), "expects a Approval; got a Order"),
    ],
)
def test_a_bad_payload_is_refused_and_the_instance_keeps_waiting(
    runner: JobRunner, workflows: WorkflowClient, payload: object, message: str
) -> None:
    instance_id = workflows.start(flows.WAIT_FIRST, {"order_id": "o-1"})
    with pytest.raises(InvalidSignalPayload, match=message):
        workflows.signal("approval", "o-1", payload)
    assert runner.jobs() == []
    assert bookmarks(runner) == 1
    runner.assert_instance(instance_id, InstanceState.SUSPENDED)
    assert workflows.signal("approval", "o-1", {"approved": True, "by": "y", "note": "ok"})


def test_bind_applies_the_payload_and_a_correlation_may_be_computed(
    runner: JobRunner, workflows: WorkflowClient
) -> None:
    instance_id = workflows.start(flows.WAIT_WITH_TIMEOUT, {"key": 42})
    runner.run_until_idle()
    assert workflows.signal("go", "42", [1, 2, 3])
    runner.run_until_idle()
    instance = runner.assert_instance(instance_id, InstanceState.COMPLETED)
    assert instance.data["go"] == [1, 2, 3]
    assert flows.calls == ["first", "second"]


def test_a_bad_correlation_fails_the_start_and_stores_nothing(
    runner: JobRunner, workflows: WorkflowClient
) -> None:
    with pytest.raises(WorkflowStepError, match="has no 'order_id'"):
        workflows.start(flows.WAIT_FIRST, {})
    assert bookmarks(runner) == 0
    assert workflows.list().items == []


def test_a_timeout_takes_the_on_timeout_path_and_a_late_signal_finds_nothing(
    runner: JobRunner, workflows: WorkflowClient
) -> None:
    instance_id = workflows.start(flows.WAIT_WITH_TIMEOUT, {"key": "k"})
    runner.run_until_idle()
    runner.assert_instance(instance_id, InstanceState.SUSPENDED)  # a timeout is no progress
    (timer,) = runner.jobs(JobState.SCHEDULED)
    assert timer.due_at == runner.clock.now() + timedelta(minutes=30)
    runner.advance(timedelta(minutes=30))
    runner.run_until_idle()
    assert flows.calls == ["first", "expire", "second"]
    instance = runner.assert_instance(instance_id, InstanceState.COMPLETED)
    assert instance.data["expired"] is True
    assert "go" not in instance.data
    assert workflows.signal("go", "k", True) is False


def test_a_signal_before_the_timeout_wins_and_the_timer_then_does_nothing(
    runner: JobRunner, workflows: WorkflowClient
) -> None:
    instance_id = workflows.start(flows.WAIT_WITH_TIMEOUT, {"key": "k"})
    runner.run_until_idle()
    assert workflows.signal("go", "k", "yes")
    runner.run_until_idle()
    runner.assert_instance(instance_id, InstanceState.COMPLETED)
    runner.advance(timedelta(minutes=30))
    assert runner.run_until_idle() == 1  # the timer runs, and does nothing
    assert flows.calls == ["first", "second"]
    runner.assert_instance(instance_id, InstanceState.COMPLETED)


def test_a_signal_racing_a_running_timeout_loses_cleanly(
    runner: JobRunner, workflows: WorkflowClient
) -> None:
    instance_id = workflows.start(flows.WAIT_WITH_TIMEOUT, {"key": "k"})
    runner.run_until_idle()
    runner.advance(timedelta(minutes=30))
    # The timeout job runs first (consumes the bookmark), the signal comes after.
    runner.run_until_idle()
    assert workflows.signal("go", "k", "late") is False
    runner.run_until_idle()
    resumes = [j for j in runner.jobs() if j.invocation.target == targets.RESUME]
    assert len(resumes) == 1 and resumes[0].invocation.args[3] is True
    runner.assert_instance(instance_id, InstanceState.COMPLETED)


def test_a_timeout_fired_after_the_signal_was_consumed_resumes_nothing(
    runner: JobRunner, workflows: WorkflowClient
) -> None:
    instance_id = workflows.start(flows.WAIT_WITH_TIMEOUT, {"key": "k"})
    runner.run_until_idle()
    runner.advance(timedelta(minutes=30))  # the timer is due and enqueued, not yet run
    assert workflows.signal("go", "k", "first!")  # the signal consumes the bookmark first
    runner.run_until_idle()
    resumes = [j for j in runner.jobs() if j.invocation.target == targets.RESUME]
    assert [r.invocation.args[3] for r in resumes] == [False]
    instance = runner.assert_instance(instance_id, InstanceState.COMPLETED)
    assert instance.data["go"] == "first!"
    assert flows.calls == ["first", "second"]


def test_signals_and_timeouts_racing_on_threads_resume_each_instance_exactly_once(
    runner: JobRunner, workflows: WorkflowClient
) -> None:
    count = 30
    ids = [workflows.start(flows.MANY_WAITS, {"key": f"k{n % 10}"}) for n in range(count)]
    runner.advance(timedelta(minutes=5))  # every timeout due and enqueued
    storage: JobStorage = runner.storage
    timers = runner.jobs(JobState.ENQUEUED)
    assert len(timers) == count
    results: list[bool] = []
    lock = threading.Lock()

    def signal(key: str) -> None:
        delivered = workflows.signal("ping", key, key)
        with lock:
            results.append(delivered)

    def run_timers() -> None:
        runner.run_until_idle()

    threads = [threading.Thread(target=signal, args=(f"k{n % 10}",)) for n in range(count)]
    threads.append(threading.Thread(target=run_timers))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    runner.run_until_idle()
    resumes = Counter(
        j.workflow_instance_id for j in runner.jobs() if j.invocation.target == targets.RESUME
    )
    assert set(resumes) == set(ids)
    assert set(resumes.values()) == {1}
    by_signal = sum(
        1
        for j in runner.jobs()
        if j.invocation.target == targets.RESUME and j.invocation.args[3] is False
    )
    assert results.count(True) == by_signal
    for instance_id in ids:
        runner.assert_instance(instance_id, InstanceState.COMPLETED)
    assert flows.calls.count("plain") == count
    assert storage is runner.storage


def test_waits_in_parallel_branches_join_after_both_signals(
    runner: JobRunner, workflows: WorkflowClient
) -> None:
    instance_id = workflows.start(flows.PARALLEL_WAITS, {"key": "p"})
    runner.assert_instance(instance_id, InstanceState.SUSPENDED)
    assert set(workflows.position(instance_id).waiting) == {"sig1", "sig2"}
    assert workflows.signal("right", "p", 2)
    runner.run_until_idle()
    runner.assert_instance(instance_id, InstanceState.SUSPENDED)
    assert workflows.signal("left", "p", 1)
    runner.run_until_idle()
    instance = runner.assert_instance(instance_id, InstanceState.COMPLETED)
    assert (instance.data["left"], instance.data["right"]) == (1, 2)


def test_a_stale_bookmark_of_a_finished_instance_is_skipped_and_removed(
    runner: JobRunner, workflows: WorkflowClient
) -> None:
    failed = workflows.start(flows.WAIT_AND_FAIL, {"key": "k", "fail": {"plain": "always"}})
    runner.run_until_idle(throw_on_failure=False)
    runner.assert_instance(failed, InstanceState.FAILED)
    assert bookmarks(runner) == 1  # left behind by the failed instance
    runner.clock.advance(timedelta(seconds=1))
    waiting = workflows.start(flows.WAIT_AND_FAIL, {"key": "k"})
    runner.run_until_idle()
    assert workflows.signal("never", "k") is True  # the stale one is skipped
    assert bookmarks(runner) == 0
    runner.run_until_idle()
    runner.assert_instance(waiting, InstanceState.COMPLETED)
    assert workflows.signal("never", "k") is False


def test_a_hundred_concurrent_signals_at_ten_instances_resume_each_once(
    runner: JobRunner, workflows: WorkflowClient
) -> None:
    ids = [workflows.start(flows.WAIT_FIRST, {"order_id": f"o-{n}"}) for n in range(10)]
    barrier = threading.Barrier(100)
    results: list[tuple[int, bool]] = []
    lock = threading.Lock()

    def send(n: int) -> None:
        barrier.wait()
        delivered = workflows.signal("approval", f"o-{n % 10}", {"approved": True, "by": str(n)})
        with lock:
            results.append((n % 10, delivered))

    threads = [threading.Thread(target=send, args=(n,)) for n in range(100)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(results) == 100
    assert sorted(key for key, delivered in results if delivered) == list(range(10))
    runner.run_until_idle()
    for instance_id in ids:
        runner.assert_instance(instance_id, InstanceState.COMPLETED)
    assert flows.calls == ["ship"] * 10
    _ = UUID  # ids are UUIDs


def test_signal_many_resumes_each_waiting_instance_and_says_which_were_waiting(
    runner: JobRunner, workflows: WorkflowClient
) -> None:
    ids = workflows.start_many(flows.WAIT_FIRST, [{"order_id": f"o-{n}"} for n in range(3)])
    approval = {"approved": True, "by": "ann"}

    resumed = workflows.signal_many([Signal("approval", f"o-{n}", approval) for n in (0, 9, 1, 2)])

    assert resumed == [True, False, True, True]
    runner.run_until_idle()
    for instance_id in ids:
        runner.assert_instance(instance_id, InstanceState.COMPLETED)
    assert bookmarks(runner) == 0


def test_signal_many_gives_two_signals_of_one_key_to_the_two_oldest_waits(
    runner: JobRunner, workflows: WorkflowClient
) -> None:
    older = workflows.start(flows.WAIT_FIRST, {"order_id": "same"})
    runner.clock.advance(timedelta(seconds=1))
    newer = workflows.start(flows.WAIT_FIRST, {"order_id": "same"})
    signal = Signal("approval", "same", {"approved": True, "by": "x"})

    assert workflows.signal_many([signal, signal, signal]) == [True, True, False]
    runner.run_until_idle()
    runner.assert_instance(older, InstanceState.COMPLETED)
    runner.assert_instance(newer, InstanceState.COMPLETED)


def test_signal_many_with_one_bad_payload_delivers_none(
    runner: JobRunner, workflows: WorkflowClient
) -> None:
    workflows.start_many(flows.WAIT_FIRST, [{"order_id": "o-1"}, {"order_id": "o-2"}])
    good = Signal("approval", "o-1", {"approved": True, "by": "ann"})
    bad = Signal("approval", "o-2", {"approved": "yes", "by": "ann"})

    with pytest.raises(InvalidSignalPayload, match="must be bool"):
        workflows.signal_many([good, bad])

    assert runner.jobs() == []
    assert bookmarks(runner) == 2


def test_signal_many_skips_a_stale_wait_and_delivers_to_the_next_one(
    runner: JobRunner, workflows: WorkflowClient
) -> None:
    failed = workflows.start(flows.WAIT_AND_FAIL, {"key": "k", "fail": {"plain": "always"}})
    runner.run_until_idle(throw_on_failure=False)
    runner.assert_instance(failed, InstanceState.FAILED)
    runner.clock.advance(timedelta(seconds=1))
    waiting = workflows.start(flows.WAIT_AND_FAIL, {"key": "k"})
    runner.run_until_idle()

    assert workflows.signal_many([Signal("never", "k"), Signal("never", "k")]) == [True, False]
    assert bookmarks(runner) == 0
    runner.run_until_idle()
    runner.assert_instance(waiting, InstanceState.COMPLETED)


@pytest.mark.parametrize(("name", "correlation"), [("", "k"), (None, "k"), ("go", 7)])
def test_a_signal_with_a_bad_name_or_correlation_is_refused_when_made(
    name: object, correlation: object
) -> None:
    with pytest.raises((ValueError, TypeError)):
        Signal(name, correlation)  # type: ignore[arg-type]
