"""The management commands: option checks, running until idle, the scheduler, purging,
several processes, and the connection hygiene they hand to the runtime."""

from __future__ import annotations

import gc
import io
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from millrace_django.contract import JobState
from millrace_django.management import support
from millrace_django.management.support import (
    duration_text,
    fresh_connections,
    parse_duration,
    tidy_connections,
)
from millrace_django.models import JOB_STATE_CODES, Job, Worker
from tests.unit import command_jobs

transactional = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def forget_runs() -> Iterator[None]:
    command_jobs.ran.clear()
    yield
    command_jobs.ran.clear()


def run(command: str, *args: str) -> str:
    out = io.StringIO()
    call_command(command, *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def run_bounded(command: str, *args: str, timeout: float = 60.0) -> str:
    """:func:`run` on a thread of its own; fails if the command has not returned (or
    raised) within ``timeout`` seconds."""
    returned: list[str] = []
    raised: list[BaseException] = []

    def target() -> None:
        try:
            returned.append(run(command, *args))
        except BaseException as error:
            raised.append(error)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout)
    assert not thread.is_alive(), f"{command} {' '.join(args)} still runs after {timeout:g} s"
    if raised:
        raise raised[0]
    return returned[0]


def state_of(job_id: UUID) -> JobState:
    return {code: state for state, code in JOB_STATE_CODES.items()}[
        Job.objects.get(uuid=job_id).state
    ]


# -- options ----------------------------------------------------------------------------


def test_an_unknown_queue_is_an_error_naming_the_configured_queues() -> None:
    with pytest.raises(CommandError, match=r"unknown queue 'nope'.*default, emails, reports"):
        run("millrace_worker", "--queues", "emails,nope", "--skip-checks")


@pytest.mark.parametrize(
    ("option", "value"), [("--concurrency", "0"), ("--processes", "0"), ("--concurrency", "-2")]
)
def test_counts_below_one_are_errors(option: str, value: str) -> None:
    with pytest.raises(CommandError, match=f"{option} must be at least 1"):
        run("millrace_worker", option, value, "--skip-checks")


def test_a_blank_queue_name_is_an_error() -> None:
    with pytest.raises(CommandError, match="comma-separated queue names"):
        run("millrace_worker", "--queues", "emails,,default", "--skip-checks")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("45", timedelta(seconds=45)),
        ("45s", timedelta(seconds=45)),
        ("90m", timedelta(minutes=90)),
        ("12h", timedelta(hours=12)),
        ("1.5d", timedelta(hours=36)),
        ("2w", timedelta(weeks=2)),
    ],
)
def test_durations_read_units(text: str, expected: timedelta) -> None:
    assert parse_duration("--older-than", text) == expected


@pytest.mark.parametrize("text", ["", "0", "-3d", "3y", "soon"])
def test_bad_durations_are_errors(text: str) -> None:
    with pytest.raises(CommandError, match="--older-than takes a positive duration"):
        parse_duration("--older-than", text)


# -- the worker -------------------------------------------------------------------------


@transactional
def test_until_idle_runs_what_is_claimable_and_returns() -> None:
    ids = [command_jobs.record.enqueue(f"job-{n}") for n in range(5)]
    output = run("millrace_worker", "--until-idle", "--concurrency", "2")
    assert sorted(command_jobs.ran) == [f"job-{n}" for n in range(5)]
    assert all(state_of(job_id) is JobState.SUCCEEDED for job_id in ids)
    assert "5 claimed (5 succeeded)" in output


@transactional
def test_a_job_raising_keyboard_interrupt_dies_and_until_idle_still_returns() -> None:
    raising = command_jobs.interrupt.enqueue()
    after = command_jobs.record.enqueue("after")
    output = run_bounded("millrace_worker", "--until-idle", "--concurrency", "1")
    assert (state_of(raising), state_of(after)) == (JobState.DEAD, JobState.SUCCEEDED)
    error = Job.objects.get(uuid=raising).last_error or ""
    assert error.rstrip().endswith("KeyboardInterrupt: raised by the job")
    assert "2 claimed (1 dead, 1 succeeded)" in output


@transactional
def test_the_worker_hides_its_startup_heap_from_the_garbage_collector() -> None:
    gc.unfreeze()
    run("millrace_worker", "--until-idle", "--no-scheduler")
    assert gc.get_freeze_count() > 0


@transactional
def test_until_idle_activates_due_jobs_first_unless_there_is_no_scheduler() -> None:
    past = datetime.now(UTC) - timedelta(seconds=1)
    job_id = command_jobs.record.schedule("due", at=past)
    run("millrace_worker", "--until-idle", "--no-scheduler")
    assert state_of(job_id) is JobState.SCHEDULED
    run("millrace_worker", "--until-idle")
    assert state_of(job_id) is JobState.SUCCEEDED


@transactional
def test_until_done_waits_for_retries_and_scheduled_jobs_due_within_its_bound() -> None:
    retried = command_jobs.fails_once.enqueue("retried")
    scheduled = command_jobs.record.schedule("scheduled", delay=timedelta(milliseconds=500))
    later = command_jobs.record.schedule("later", delay=timedelta(hours=1))
    run_bounded("millrace_worker", "--until-idle")
    assert (state_of(retried), state_of(scheduled)) == (JobState.FAILED, JobState.SCHEDULED)

    output = run_bounded("millrace_worker", "--until-done=30")
    assert (state_of(retried), state_of(scheduled)) == (JobState.SUCCEEDED, JobState.SUCCEEDED)
    assert state_of(later) is JobState.SCHEDULED  # due after the bound: not waited for
    assert "2 claimed (2 succeeded)" in output


@transactional
def test_until_done_without_a_timeout_takes_the_default_one() -> None:
    job_id = command_jobs.record.schedule("soon", delay=timedelta(milliseconds=200))
    run_bounded("millrace_worker", "--until-done")
    assert state_of(job_id) is JobState.SUCCEEDED


@transactional
def test_until_done_fails_naming_the_jobs_left_when_its_timeout_passes() -> None:
    job_id = command_jobs.record.schedule("never activated", delay=timedelta(milliseconds=100))
    with pytest.raises(
        CommandError, match=r"--until-done: 1 job\(s\) due by .* had not finished"
    ) as failed:
        run_bounded("millrace_worker", "--until-done=0.5", "--no-scheduler")
    assert f"{job_id} (tests.unit.command_jobs:record) scheduled, due " in str(failed.value)
    assert state_of(job_id) is JobState.SCHEDULED


def test_until_done_and_until_idle_exclude_each_other() -> None:
    with pytest.raises(CommandError, match="not allowed with argument"):
        run("millrace_worker", "--until-idle", "--until-done", "--skip-checks")


def test_a_bad_until_done_timeout_is_an_error() -> None:
    with pytest.raises(CommandError, match="--until-done takes a positive duration"):
        run("millrace_worker", "--until-done=soon", "--skip-checks")


@transactional
def test_queues_narrow_what_the_worker_claims() -> None:
    email = command_jobs.record_email.enqueue("email")
    other = command_jobs.record.enqueue("other")
    run("millrace_worker", "--until-idle", "--queues", "emails")
    assert (state_of(email), state_of(other)) == (JobState.SUCCEEDED, JobState.ENQUEUED)


@transactional
@pytest.mark.parametrize("until", ["--until-idle", "--until-done=60"])
def test_several_processes_share_the_work_and_exit_cleanly(
    until: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The children open the test database (a file) through the sample settings.
    monkeypatch.setenv("MILLRACE_SQLITE_PATH", str(connection.settings_dict["NAME"]))
    ids = [command_jobs.record.enqueue(f"job-{n}") for n in range(20)]
    output = run("millrace_worker", "--processes", "2", until, "--concurrency", "2")
    assert "2 worker processes stopped cleanly" in output
    rows = Job.objects.filter(uuid__in=ids)
    assert {row.state for row in rows} == {JOB_STATE_CODES[JobState.SUCCEEDED]}
    assert command_jobs.ran == []  # the children ran them, not this process


# -- the scheduler and the purge --------------------------------------------------------


@transactional
def test_the_scheduler_makes_one_pass_with_once() -> None:
    job_id = command_jobs.record.schedule("due", at=datetime.now(UTC) - timedelta(seconds=1))
    assert "activated 1, fired 0 recurring, purged 0" in run("millrace_scheduler", "--once")
    assert state_of(job_id) is JobState.ENQUEUED


@transactional
def test_the_scheduler_forgets_workers_silent_for_longer_than_the_worker_retention() -> None:
    now = datetime.now(UTC)
    for worker_id, seen_at in (("gone", now - timedelta(days=2)), ("alive", now)):
        Worker.objects.create(
            worker_id=worker_id,
            hostname="host",
            pid=1,
            queues=["default"],
            concurrency=1,
            in_flight=0,
            started_at=now - timedelta(days=3),
            seen_at=seen_at,
        )
    assert "forgot 1 silent worker\n" in run("millrace_scheduler", "--once")
    assert list(Worker.objects.values_list("worker_id", flat=True)) == ["alive"]


@transactional
def test_purge_deletes_jobs_finished_before_the_retention_and_prints_the_count() -> None:
    old = [command_jobs.record.enqueue(f"old-{n}") for n in range(3)]
    recent = command_jobs.record.enqueue("recent")
    waiting = command_jobs.record.schedule("later", delay=timedelta(days=30))
    run("millrace_worker", "--until-idle", "--no-scheduler")
    Job.objects.filter(uuid__in=old).update(finished_at=datetime.now(UTC) - timedelta(days=8))
    output = run("millrace_purge", "--batch-size", "2")
    assert output.startswith("purged 3 finished jobs")
    assert set(Job.objects.values_list("uuid", flat=True)) == {recent, waiting}


@transactional
def test_purge_takes_an_age_of_its_own() -> None:
    job_id = command_jobs.record.enqueue("done")
    run("millrace_worker", "--until-idle", "--no-scheduler")
    Job.objects.filter(uuid=job_id).update(finished_at=datetime.now(UTC) - timedelta(hours=2))
    assert run("millrace_purge", "--older-than", "3h", "-v", "0") == "0\n"
    assert run("millrace_purge", "--older-than", "1h", "-v", "0") == "1\n"


def test_purge_without_retention_needs_an_age(settings: Any) -> None:
    settings.MILLRACE = {"RETENTION": None}
    with pytest.raises(CommandError, match=r"RETENTION'\] is None.*--older-than"):
        run("millrace_purge")


# -- connection hygiene -----------------------------------------------------------------


@transactional
def test_loop_turns_keep_a_healthy_connection_and_drop_a_broken_one(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    connection.ensure_connection()
    with tidy_connections():
        pass
    assert connection.connection is not None  # CONN_MAX_AGE=0 does not reconnect each turn
    connection.errors_occurred = True
    monkeypatch.setattr(connection, "is_usable", lambda: False)
    with tidy_connections():
        assert connection.connection is None


@pytest.fixture
def thread_clock(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    """The monotonic clock the job hook reads, set by the test; no check made yet."""
    now = [1_000.0]
    monkeypatch.setattr(support, "monotonic", lambda: now[0])
    monkeypatch.delattr(support._checked, "at", raising=False)
    return now


@transactional
def test_a_job_starts_and_ends_with_djangos_request_rules(thread_clock: list[float]) -> None:
    connection.ensure_connection()
    with fresh_connections():
        assert connection.connection is None  # CONN_MAX_AGE=0: closed before the job
        connection.ensure_connection()
    assert connection.connection is None  # and after it


@transactional
def test_a_job_right_after_another_on_its_thread_shares_that_ones_closing_check(
    thread_clock: list[float],
) -> None:
    with fresh_connections():
        pass
    connection.ensure_connection()  # (on a pool thread nothing runs between two jobs)
    thread_clock[0] += support.BACK_TO_BACK / 2
    with fresh_connections():
        assert connection.connection is not None  # the previous job's check covered it
    assert connection.connection is None  # its own closing check still runs
    connection.ensure_connection()
    thread_clock[0] += 2 * support.BACK_TO_BACK
    with fresh_connections():
        assert connection.connection is None  # later than that: checked again


@pytest.mark.parametrize("text", ["2w", "30d", "0.25s", "90m", "1209600.5"])
def test_a_duration_handed_to_a_child_process_reads_back_the_same(text: str) -> None:
    """What ``--processes`` forwards (``--until-done`` among others) is read back as it
    was given: two weeks is not written ``1.2096e+06``, which the option refuses."""
    duration = parse_duration("--until-done", text)
    assert parse_duration("--until-done", duration_text(duration)) == duration
