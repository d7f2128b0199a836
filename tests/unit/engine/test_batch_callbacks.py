"""Batch completion callbacks: ``batch(on_complete=...)`` runs one job once every job of
the batch is terminal, with the counts, exactly once."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest

from millrace_django import jobs
from millrace_django.contract import ClaimRequest, JobRecord, JobState
from millrace_django.engine import (
    EngineSettings,
    InvalidJobArguments,
    JobContext,
    Retry,
    UnknownQueue,
    UnserializableArgument,
    current_tenant,
    job,
    tenant,
)
from millrace_django.engine.batches import watch_batch, watcher_key
from millrace_django.runtime import run_claimed
from millrace_django.testing import JobRunner

calls: list[tuple[str, Any]] = []
flaky_failures: list[int] = []


@job
def ok(label: str) -> str:
    calls.append(("ok", label))
    return label


@job(retry=Retry.none())
def boom(label: str) -> None:
    raise RuntimeError(f"boom {label}")


@job(retry=Retry.fixed(timedelta(seconds=10), 4))
def flaky(label: str) -> None:
    """Fails three times, then succeeds."""
    if len(flaky_failures) < 3:
        flaky_failures.append(1)
        raise RuntimeError("not yet")
    calls.append(("flaky", label))


@job
def done(
    report: str, *, batch_id: str, succeeded: int, dead: int, cancelled: int, channel: str = "-"
) -> None:
    calls.append(
        (
            "done",
            {
                "report": report,
                "batch_id": batch_id,
                "succeeded": succeeded,
                "dead": dead,
                "cancelled": cancelled,
                "channel": channel,
                "tenant": current_tenant(),
            },
        )
    )


@job
def counts_only(**counts: Any) -> None:
    calls.append(("counts_only", counts))


@job(retry=Retry.fixed(timedelta(seconds=5), 2))
def fragile_done(*, batch_id: str, succeeded: int, dead: int, cancelled: int) -> None:
    calls.append(("fragile_done", succeeded))
    if len([c for c in calls if c[0] == "fragile_done"]) == 1:
        raise RuntimeError("callback hiccup")


@job
def no_counts(report: str) -> None:  # cannot take the counts
    calls.append(("no_counts", report))


@pytest.fixture
def runner() -> Iterator[JobRunner]:
    calls.clear()
    flaky_failures.clear()
    settings = EngineSettings(
        queues=frozenset({"default", "emails"}), default_retry=Retry.none(), interruption_limit=10
    )
    with JobRunner(config=settings).installed() as runner:
        yield runner


def _done_calls() -> list[dict[str, Any]]:
    return [payload for name, payload in calls if name == "done"]


def _watchers(runner: JobRunner) -> list[JobRecord]:
    return [j for j in runner.jobs() if j.invocation.target == watch_batch.target]


def _callbacks(runner: JobRunner, target: str) -> list[JobRecord]:
    return [j for j in runner.jobs() if j.invocation.target == target]


def _drain(runner: JobRunner, seconds: int) -> None:
    """Run everything due, one second of fake time at a time."""
    for _ in range(seconds):
        runner.run_until_idle(throw_on_failure=False)
        runner.advance(timedelta(seconds=1))
    runner.run_until_idle(throw_on_failure=False)


def test_the_callback_runs_once_with_the_counts(runner: JobRunner) -> None:
    with jobs.batch(done, on_complete_args=("r1",), on_complete_kwargs={"channel": "ops"}) as batch:
        batch.enqueue(ok, "a")
        batch.enqueue(ok, "b")
        batch.enqueue(boom, "c")
        batch.schedule(ok, "d", delay=timedelta(hours=1))
    assert len(batch.ids) == 4
    assert runner.client.cancel(batch.ids[3])
    _drain(runner, 5)
    assert _done_calls() == [
        {
            "report": "r1",
            "batch_id": str(batch.id),
            "succeeded": 2,
            "dead": 1,
            "cancelled": 1,
            "channel": "ops",
            "tenant": None,
        }
    ]
    (callback,) = _callbacks(runner, done.target)
    assert callback.state is JobState.SUCCEEDED
    assert all(w.state is JobState.SUCCEEDED for w in _watchers(runner))
    _drain(runner, 120)
    assert len(_done_calls()) == 1


def test_the_watcher_is_stored_with_the_batch_on_the_callbacks_queue(runner: JobRunner) -> None:
    with jobs.batch(done.using(queue="emails", priority=3), on_complete_args=("r",)) as batch:
        batch.enqueue(ok, "a")
    (watcher,) = _watchers(runner)
    assert watcher.queue == "emails" and watcher.priority == 3
    assert watcher.state is JobState.SCHEDULED
    assert watcher.idempotency_key == watcher_key(batch.id)
    assert watcher.invocation.kwargs["job_ids"] == [str(batch.ids[0])]
    _drain(runner, 3)
    (callback,) = _callbacks(runner, done.target)
    assert (callback.queue, callback.priority, callback.state) == ("emails", 3, JobState.SUCCEEDED)


def test_not_before_the_last_job_is_terminal(runner: JobRunner) -> None:
    with jobs.batch(counts_only) as batch:
        batch.enqueue(ok, "a")
        batch.enqueue(flaky, "b")
    seen_before_final = False
    for _ in range(60):
        runner.run_until_idle(throw_on_failure=False)
        flaky_job = runner.get(batch.ids[1])
        if flaky_job.state is not JobState.SUCCEEDED:
            assert not [c for c in calls if c[0] == "counts_only"]
            seen_before_final = True
        runner.advance(timedelta(seconds=1))
    runner.run_until_idle(throw_on_failure=False)
    assert seen_before_final
    assert runner.get(batch.ids[1]).failures == 3
    callbacks = [payload for name, payload in calls if name == "counts_only"]
    assert callbacks == [{"batch_id": str(batch.id), "succeeded": 2, "dead": 0, "cancelled": 0}]
    # Each later watcher carries only what was still pending, under the same key.
    watchers = _watchers(runner)
    assert len(watchers) > 1
    assert {w.idempotency_key for w in watchers} == {watcher_key(batch.id)}
    assert watchers[-1].invocation.kwargs["job_ids"] == [str(batch.ids[1])]


def test_the_poll_backs_off_from_one_to_thirty_seconds(runner: JobRunner) -> None:
    with jobs.batch(counts_only) as batch:
        batch.schedule(ok, "late", delay=timedelta(minutes=3))
    _drain(runner, 200)
    delays = [w.invocation.kwargs["poll_seconds"] for w in _watchers(runner)]
    assert delays[:7] == [1.0, 2.0, 4.0, 8.0, 16.0, 30.0, 30.0]
    assert set(delays[5:]) == {30.0}
    assert [name for name, _ in calls] == ["ok", "counts_only"]


def test_a_watcher_run_twice_still_enqueues_one_callback(runner: JobRunner) -> None:
    with jobs.batch(counts_only) as batch:
        batch.enqueue(ok, "a")
    runner.run_until_idle()
    runner.clock.advance(timedelta(seconds=1))
    runner.advance(timedelta(0))  # activate the due watcher without running it

    def claim(worker: str) -> JobRecord:
        (claimed,) = runner.storage.claim(
            ClaimRequest(
                worker_id=worker,
                queues=frozenset({"default"}),
                max_count=1,
                lease=timedelta(seconds=5),
            )
        )
        return claimed

    def execute(claimed: JobRecord) -> Any:
        context = JobContext.for_job(claimed, runner.clock, storage=runner.storage)
        outcome = run_claimed(claimed, context, clock=runner.clock, config=runner.config)
        assert outcome.transition is not None
        return outcome.transition

    first = claim("worker-a")
    first_transition = execute(first)
    runner.clock.advance(timedelta(seconds=10))  # worker-a's lease is lost
    second = claim("worker-b")
    assert second.id == first.id and second.attempt == first.attempt + 1
    second_transition = execute(second)
    assert len(second_transition.enqueue) == 1
    assert runner.storage.apply(second_transition) is True
    assert runner.storage.apply(first_transition) is False  # fenced out
    _drain(runner, 60)
    assert [name for name, _ in calls] == ["ok", "counts_only"]
    assert len(_callbacks(runner, counts_only.target)) == 1


def test_a_failing_callback_follows_its_own_retry_policy(runner: JobRunner) -> None:
    with jobs.batch(fragile_done) as batch:
        batch.enqueue(ok, "a")
    _drain(runner, 3)
    (callback,) = _callbacks(runner, fragile_done.target)
    assert callback.state is JobState.FAILED
    _drain(runner, 6)
    callback = runner.get(callback.id)
    assert (callback.state, callback.failures) == (JobState.SUCCEEDED, 1)
    assert [c for c in calls if c[0] == "fragile_done"] == [("fragile_done", 1)] * 2
    assert len(_callbacks(runner, fragile_done.target)) == 1
    assert len(batch.ids) == 1


def test_the_tenant_is_kept(runner: JobRunner) -> None:
    with tenant("acme"), jobs.batch(done, on_complete_args=("t",)) as batch:
        batch.enqueue(ok, "a")
    _drain(runner, 3)
    assert [p["tenant"] for p in _done_calls()] == ["acme"]
    assert {w.tenant_id for w in _watchers(runner)} == {"acme"}
    assert {c.tenant_id for c in _callbacks(runner, done.target)} == {"acme"}
    assert batch.tenant == "acme"


def test_an_empty_batch_runs_the_callback_at_once_with_zero_counts(runner: JobRunner) -> None:
    with jobs.batch(counts_only) as batch:
        pass
    assert batch.ids == []
    runner.run_until_idle()
    assert calls == [
        ("counts_only", {"batch_id": str(batch.id), "succeeded": 0, "dead": 0, "cancelled": 0})
    ]
    assert _watchers(runner) == []


def test_a_batch_without_callback_stores_no_watcher(runner: JobRunner) -> None:
    with jobs.batch() as batch:
        batch.enqueue(ok, "a")
    assert [j.id for j in runner.jobs()] == batch.ids


# -- all or nothing -------------------------------------------------------------------


def test_a_batch_refused_midway_stores_neither_jobs_nor_watcher(runner: JobRunner) -> None:
    with pytest.raises(UnserializableArgument), jobs.batch(counts_only) as batch:
        batch.enqueue(ok, "a")
        batch.enqueue(ok, object())
    assert runner.jobs() == [] and batch.ids == []


def test_a_batch_left_by_an_exception_stores_nothing(runner: JobRunner) -> None:
    with pytest.raises(RuntimeError), jobs.batch(counts_only) as batch:
        batch.enqueue(ok, "a")
        raise RuntimeError("changed my mind")
    assert runner.jobs() == []


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"on_complete": no_counts, "on_complete_args": ("r",)}, InvalidJobArguments),
        ({"on_complete": done}, InvalidJobArguments),  # report missing
        ({"on_complete": done, "on_complete_args": (object(),)}, UnserializableArgument),
        ({"on_complete": done.using(queue="nowhere"), "on_complete_args": ("r",)}, UnknownQueue),
        ({"on_complete": counts_only, "on_complete_kwargs": {"dead": 1}}, ValueError),
        ({"on_complete_args": ("r",)}, ValueError),
        ({"on_complete": ok.fn}, TypeError),
    ],
)
def test_a_bad_callback_is_refused_at_batch_creation(
    runner: JobRunner, options: dict[str, Any], error: type[Exception]
) -> None:
    with pytest.raises(error):
        jobs.batch(**options)
    assert runner.jobs() == []


def test_items_with_idempotency_keys_are_refused(runner: JobRunner) -> None:
    with pytest.raises(ValueError, match="idempotency"), jobs.batch(counts_only) as batch:
        batch.enqueue(ok, "a")
        batch.enqueue(ok, "b", idempotency_key="k")
    assert runner.jobs() == []


def test_the_callback_keeps_its_hard_timeout_and_retry_filters(runner: JobRunner) -> None:
    configured = done.using(hard_timeout=45, retry_on=ConnectionError, give_up_on=KeyError)
    with jobs.batch(configured, on_complete_args=("f",)) as batch:
        batch.enqueue(ok, "a")
    _drain(runner, 5)
    (callback,) = _callbacks(runner, done.target)
    assert callback.hard_timeout == timedelta(seconds=45)
    assert (callback.retry.retry_on, callback.retry.give_up_on) == (
        ("builtins.ConnectionError",),
        ("builtins.KeyError",),
    )
