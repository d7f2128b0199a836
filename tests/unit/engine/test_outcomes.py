"""Outcome rules: the transition each way a claimed job can end, applied to real storage."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from millrace_django.clock import FakeClock
from millrace_django.contract import JobRecord, JobState
from millrace_django.engine import (
    CancelReason,
    EngineSettings,
    JobClient,
    Retry,
    UnresolvableTarget,
    outcomes,
    tenant,
)
from millrace_django.storage.memory import MemoryStorage
from tests.unit.engine import sample_jobs
from tests.unit.engine.helpers import WORKER, claim

OBSERVERS = sample_jobs.send_invoice.failure_observers


def stored(storage: MemoryStorage, job: JobRecord) -> JobRecord:
    found = storage.get_job(job.id)
    assert found is not None
    return found


def test_a_fresh_claim_runs(
    client: JobClient, storage: MemoryStorage, clock: FakeClock, config: EngineSettings
) -> None:
    sample_jobs.add.enqueue(1, 2)
    assert outcomes.before_run(claim(storage), clock=clock, config=config) is None


def test_success_stores_the_result_and_releases_the_continuations(
    client: JobClient, storage: MemoryStorage, clock: FakeClock, config: EngineSettings
) -> None:
    parent = sample_jobs.add.enqueue(1, 2)
    child = client.continue_with(parent, sample_jobs.add, 3, 4)
    job = claim(storage)
    transition = outcomes.succeeded(job, {"sum": 3}, clock=clock, config=config)
    assert (transition.target, transition.failures) == (JobState.SUCCEEDED, 0)
    assert (transition.expected_worker_id, transition.expected_attempt) == (WORKER, 1)
    assert transition.activate_continuations and transition.finished_at == clock.now()
    assert storage.apply(transition)
    assert stored(storage, job).result == {"sum": 3}
    child_job = storage.get_job(child)
    assert child_job is not None and child_job.state is JobState.ENQUEUED


def test_a_result_json_cannot_store_is_a_failure_with_a_clear_error(
    client: JobClient, storage: MemoryStorage, clock: FakeClock, config: EngineSettings
) -> None:
    sample_jobs.add.enqueue(1, 2)
    transition = outcomes.succeeded(claim(storage), (1, 2), clock=clock, config=config)
    assert transition.target is JobState.FAILED
    assert transition.error is not None and "cannot be stored as its result" in transition.error
    assert "tuple" in transition.error


@pytest.mark.parametrize("result", ["a\x00b", {"text": "a\x00b"}, ["a\x00b"]])
def test_a_result_holding_a_nul_character_is_a_failure_on_every_database(
    client: JobClient, storage: MemoryStorage, clock: FakeClock, config: EngineSettings, result
) -> None:
    sample_jobs.add.enqueue(1, 2)
    transition = outcomes.succeeded(claim(storage), result, clock=clock, config=config)
    assert transition.target is JobState.FAILED
    assert transition.error is not None and "U+0000" in transition.error


def test_a_failure_waits_for_the_retry_and_spends_one_failure(
    client: JobClient, storage: MemoryStorage, clock: FakeClock, config: EngineSettings
) -> None:
    sample_jobs.explode.enqueue("boom")  # default retry: exponential(3)
    job = claim(storage)
    try:
        sample_jobs.explode("kaboom")
    except RuntimeError as error:
        transition = outcomes.failed(job, error, clock=clock, config=config)
    assert transition.target is JobState.FAILED
    assert transition.failures == 1
    assert transition.due_at == clock.now() + timedelta(seconds=5)
    assert transition.error is not None
    assert transition.error.startswith("Traceback")
    assert transition.error.endswith("\nRuntimeError: kaboom\n")
    assert "sample_jobs.py" in transition.error
    assert storage.apply(transition)
    assert stored(storage, job).last_error == transition.error


def test_retry_math_spends_failures_not_attempts(
    client: JobClient, storage: MemoryStorage, clock: FakeClock, config: EngineSettings
) -> None:
    sample_jobs.explode.enqueue("boom")
    interrupted = replace(claim(storage), attempt=5, failures=1)  # four crashes so far
    transition = outcomes.failed(interrupted, RuntimeError(), clock=clock, config=config)
    assert transition.target is JobState.FAILED
    assert transition.failures == 2
    assert transition.due_at == clock.now() + timedelta(seconds=10)


def test_the_last_failure_is_dead_and_enqueues_the_failure_observers_with_it(
    client: JobClient, storage: MemoryStorage, clock: FakeClock, config: EngineSettings
) -> None:
    with tenant("acme"):
        parent = sample_jobs.send_invoice.using(retry=Retry.none()).enqueue("42")
        child = client.continue_with(parent, sample_jobs.add, 1, 2)
    job = claim(storage, "emails")
    transition = outcomes.failed(
        job, RuntimeError("boom"), clock=clock, config=config, observers=OBSERVERS
    )
    assert (transition.target, transition.failures) == (JobState.DEAD, 1)
    assert transition.cancel_continuations and transition.finished_at == clock.now()
    notify, audit = transition.enqueue
    assert notify.invocation.target == sample_jobs.notify_ops.target
    assert audit.invocation.target == sample_jobs.audit.target
    for observer in (notify, audit):
        assert observer.invocation.args == (str(job.id),)
        assert observer.state is JobState.ENQUEUED
        assert observer.tenant_id == "acme"
    assert (notify.queue, audit.queue) == ("default", "emails")  # each observer's own options

    assert storage.apply(transition)
    assert stored(storage, job).state is JobState.DEAD
    child_job = storage.get_job(child)
    assert child_job is not None and child_job.state is JobState.CANCELLED
    assert storage.get_job(notify.id) is not None and storage.get_job(audit.id) is not None


def test_an_observer_whose_target_is_gone_is_still_enqueued_to_die_loudly(
    client: JobClient, storage: MemoryStorage, clock: FakeClock, config: EngineSettings
) -> None:
    sample_jobs.add.using(retry=Retry.none()).enqueue(1, 2)
    transition = outcomes.failed(
        claim(storage),
        RuntimeError(),
        clock=clock,
        config=config,
        observers=["tests.unit.engine.sample_jobs:deleted_observer"],
    )
    (observer,) = transition.enqueue
    assert observer.queue == config.default_queue
    assert observer.retry == config.default_retry


def test_a_job_claimed_too_often_without_failures_is_a_poison_pill(
    storage: MemoryStorage, clock: FakeClock
) -> None:
    config = EngineSettings(queues=frozenset({"default", "emails"}), interruption_limit=2)
    client = JobClient(storage, clock, config)
    parent = client.enqueue(sample_jobs.send_invoice.using(queue="default"), "42")
    child = client.continue_with(parent, sample_jobs.add, 1, 2)
    for _ in range(2):
        job = claim(storage)
        assert outcomes.before_run(job, clock=clock, config=config) is None
        assert storage.apply(outcomes.released(job))
    job = claim(storage)
    assert job.attempt == 3
    verdict = outcomes.before_run(job, clock=clock, config=config, observers=OBSERVERS)
    assert verdict is not None
    assert (verdict.target, verdict.failures) == (JobState.DEAD, 0)
    assert verdict.error == (
        "Poison-pill: claimed 3 times with only 0 recorded failures — presumed to crash workers."
    )
    assert verdict.cancel_continuations
    assert [j.invocation.target for j in verdict.enqueue] == [
        sample_jobs.notify_ops.target,
        sample_jobs.audit.target,
    ]
    assert storage.apply(verdict)
    assert stored(storage, job).failures == 0
    child_job = storage.get_job(child)
    assert child_job is not None and child_job.state is JobState.CANCELLED


def test_the_poison_pill_limit_is_exclusive(
    clock: FakeClock, config: EngineSettings, client: JobClient, storage: MemoryStorage
) -> None:
    sample_jobs.add.enqueue(1, 2)
    job = claim(storage)
    at_limit = replace(job, attempt=13, failures=3)
    assert outcomes.before_run(at_limit, clock=clock, config=config) is None
    assert outcomes.is_poison_pill(replace(job, attempt=14, failures=3), 10)


def test_a_job_claimed_with_a_cancel_request_is_cancelled_without_running(
    client: JobClient, storage: MemoryStorage, clock: FakeClock, config: EngineSettings
) -> None:
    parent = sample_jobs.add.enqueue(1, 2)
    child = client.continue_with(parent, sample_jobs.add, 3, 4)
    job = claim(storage)
    assert client.cancel(parent)  # only flags the running job
    flagged = stored(storage, job)
    verdict = outcomes.before_run(flagged, clock=clock, config=config)
    assert verdict is not None
    assert (verdict.target, verdict.error) == (JobState.CANCELLED, "Cancelled by request.")
    assert verdict.failures == 0 and verdict.cancel_continuations
    assert storage.apply(verdict)
    child_job = storage.get_job(child)
    assert child_job is not None and child_job.state is JobState.CANCELLED


def test_a_release_gives_the_job_back_without_spending_budget(
    client: JobClient, storage: MemoryStorage
) -> None:
    sample_jobs.add.enqueue(1, 2)
    job = claim(storage)
    transition = outcomes.released(job)
    assert (transition.target, transition.failures, transition.error) == (
        JobState.ENQUEUED,
        0,
        None,
    )
    assert storage.apply(transition)
    again = claim(storage)
    assert (again.attempt, again.failures) == (2, 0)


def test_a_timeout_is_a_failure_saying_how_long_it_ran(
    client: JobClient, storage: MemoryStorage, clock: FakeClock, config: EngineSettings
) -> None:
    sample_jobs.send_invoice.enqueue("42")
    job = claim(storage, "emails")
    transition = outcomes.timed_out(job, timedelta(minutes=2), clock=clock, config=config)
    assert (transition.target, transition.failures) == (JobState.FAILED, 1)
    assert transition.error == "Timed out after 120 seconds."
    assert transition.due_at == clock.now() + timedelta(seconds=30)


def test_an_unrunnable_job_is_dead_at_once_with_the_reason(
    client: JobClient, storage: MemoryStorage, clock: FakeClock, config: EngineSettings
) -> None:
    sample_jobs.add.enqueue(1, 2)
    job = claim(storage)
    error = UnresolvableTarget("module 'app.jobs' has no job 'gone'")
    transition = outcomes.unrunnable(job, error, clock=clock, config=config)
    assert (transition.target, transition.failures) == (JobState.DEAD, 1)
    assert transition.error == "module 'app.jobs' has no job 'gone'"
    assert transition.cancel_continuations


@pytest.mark.parametrize(
    ("reason", "target"),
    [
        (CancelReason.REQUESTED, JobState.CANCELLED),
        (CancelReason.TIMEOUT, JobState.FAILED),
        (CancelReason.SHUTDOWN, JobState.ENQUEUED),
        (CancelReason.LEASE_LOST, None),
        (CancelReason.SUPERSEDED, None),
    ],
)
def test_a_fired_cancellation_ends_the_job_according_to_its_reason(
    client: JobClient,
    storage: MemoryStorage,
    clock: FakeClock,
    config: EngineSettings,
    reason: CancelReason,
    target: JobState | None,
) -> None:
    sample_jobs.send_invoice.enqueue("42")
    job = claim(storage, "emails")
    transition = outcomes.after_cancellation(job, reason, clock=clock, config=config)
    assert (transition.target if transition else None) is target


def test_long_errors_are_truncated_keeping_both_ends() -> None:
    text = "HEAD" + "x" * 20_000 + "RuntimeError: the message"
    kept = outcomes.error_text(RuntimeError(), traceback_text=text)
    assert len(kept) == outcomes.MAX_ERROR_LENGTH == 8192
    assert kept.startswith("HEAD") and kept.endswith("RuntimeError: the message")
    assert "(truncated)" in kept
    assert outcomes.error_text(RuntimeError(), traceback_text="short") == "short"


def test_only_a_claimed_job_has_an_outcome(client: JobClient, storage: MemoryStorage) -> None:
    waiting = storage.get_job(sample_jobs.add.enqueue(1, 2))
    assert waiting is not None
    with pytest.raises(ValueError, match="not claimed"):
        outcomes.released(waiting)
