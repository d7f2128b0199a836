"""Log records about a job carry its fields, from the runtime and from the job's own code."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator

import pytest

from millrace_django.clock import FakeClock
from millrace_django.contract import JobState
from millrace_django.engine import EngineSettings, JobClient
from millrace_django.management.support import command_logging
from millrace_django.observability import FIELDS, JobLogFilter, job_fields
from millrace_django.observability.telemetry import Observed
from millrace_django.storage.memory import MemoryStorage
from tests.unit.observability import jobs
from tests.unit.runtime.conftest import StartWorker
from tests.unit.runtime.helpers import wait_for_state, wait_until

WORKER = "worker-under-test"


class Records:
    """What the test's log handler, carrying the job filter, received so far."""

    def __init__(self, caplog: pytest.LogCaptureFixture) -> None:
        self._caplog = caplog

    def __iter__(self) -> Iterator[logging.LogRecord]:
        return iter(list(self._caplog.records))


@pytest.fixture
def records(caplog: pytest.LogCaptureFixture) -> Iterator[Records]:
    job_filter = JobLogFilter()
    caplog.handler.addFilter(job_filter)
    caplog.set_level(logging.DEBUG)
    yield Records(caplog)
    caplog.handler.removeFilter(job_filter)


def about(records: Records, job_id: object) -> list[logging.LogRecord]:
    return [r for r in records if getattr(r, "millrace_job_id", None) == str(job_id)]


def messages(records: Records, level: int) -> list[str]:
    return [r.getMessage() for r in records if r.levelno == level]


def test_the_runtimes_lines_and_the_jobs_own_lines_carry_the_job_fields(
    client: JobClient,
    storage: MemoryStorage,
    start_worker: StartWorker,
    records: Records,
) -> None:
    job_id = jobs.chatty.using(queue="emails").enqueue("invoice 7")
    start_worker(worker_id=WORKER)
    wait_for_state(storage, job_id, JobState.SUCCEEDED)
    wait_until(lambda: any("succeeded" in m for m in messages(records, logging.DEBUG)), "logs")

    mine = about(records, job_id)
    expected = {
        "millrace_job_id": str(job_id),
        "millrace_job_name": jobs.chatty.target,
        "millrace_queue": "emails",
        "millrace_attempt": 1,
        "millrace_worker_id": WORKER,
        "millrace_tenant_id": None,
    }
    for record in mine:
        assert {field: getattr(record, field) for field in FIELDS} == expected
    runtime = [r.getMessage() for r in mine if r.name.startswith("millrace_django.runtime")]
    assert [m.rsplit(" ", 1)[-1] for m in runtime] == ["claimed", "started", "succeeded"]
    assert all(r.levelno == logging.DEBUG for r in mine if r.name.startswith("millrace_django"))
    (own,) = [r for r in mine if r.name == jobs.user_logger.name]
    assert own.getMessage() == "working on invoice 7" and own.levelno == logging.INFO


def test_an_async_job_logs_with_its_fields_from_the_event_loop_thread(
    client: JobClient,
    storage: MemoryStorage,
    start_worker: StartWorker,
    records: Records,
) -> None:
    job_id = jobs.async_chatty.enqueue("a coroutine")
    start_worker(worker_id=WORKER)
    wait_for_state(storage, job_id, JobState.SUCCEEDED)
    (own,) = [r for r in records if r.name == jobs.user_logger.name]
    assert own.threadName == "millrace-asyncio"
    assert (own.millrace_job_id, own.millrace_worker_id) == (str(job_id), WORKER)  # type: ignore[attr-defined]


def test_a_retry_is_a_warning_and_a_dead_job_an_error_each_with_its_traceback(
    client: JobClient,
    storage: MemoryStorage,
    start_worker: StartWorker,
    records: Records,
) -> None:
    retried = jobs.wobbly.enqueue()
    dead = jobs.doomed.enqueue()
    start_worker(worker_id=WORKER)
    wait_for_state(storage, retried, JobState.FAILED)
    wait_for_state(storage, dead, JobState.DEAD)
    wait_until(lambda: len(about(records, dead)) >= 3, "the dead job's lines")

    (warning,) = [r for r in about(records, retried) if r.levelno == logging.WARNING]
    assert "attempt 1 failed; its retry is due at" in warning.getMessage()
    assert warning.exc_info is not None and warning.exc_info[0] is RuntimeError
    (error,) = [r for r in about(records, dead) if r.levelno == logging.ERROR]
    assert "failed for good; the job is dead: " in error.getMessage()
    assert "ValueError" in error.getMessage()
    assert error.exc_info is not None and error.exc_info[0] is ValueError


def test_the_filter_leaves_records_outside_a_job_alone_and_never_drops_one() -> None:
    record = logging.LogRecord("x", logging.INFO, __file__, 1, "outside", None, None)
    assert JobLogFilter().filter(record) is True
    assert not any(hasattr(record, field) for field in FIELDS)


def test_the_worker_commands_console_names_the_job_of_every_line_about_one(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``millrace_worker``'s own console (set up when nothing else handles the
    runtime's records) prefixes a line with its job id: the runtime's lines, and any
    ``millrace_django`` line logged while a job runs."""
    monkeypatch.setattr(logging.root, "handlers", [])  # no LOGGING: the command's own console
    job = JobClient(MemoryStorage(FakeClock()), FakeClock(), EngineSettings()).build(
        jobs.chatty, ("x",), {}, state=JobState.PROCESSING, key=None
    )
    engine = logging.getLogger("millrace_django.engine.example")
    with command_logging(verbosity=1):
        logging.getLogger("millrace_django.runtime.worker").info(
            "about job %s", job.id, extra=job_fields(job)
        )
        with Observed(job, FakeClock()):
            engine.warning("while it runs")
        engine.warning("after it ran")
    lines = capsys.readouterr().err.splitlines()
    assert [line.split("] ", 1)[0].split(" [", 1)[1] for line in lines] == [
        f"{os.getpid()} job {job.id}",
        f"{os.getpid()} job {job.id}",
        f"{os.getpid()}",
    ]
    assert lines[1].endswith("millrace_django.engine.example: while it runs")
