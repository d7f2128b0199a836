"""The job context: identity, cancellation, and buffered progress and logs."""

from __future__ import annotations

from datetime import timedelta
from uuid import uuid4

import pytest

from millrace_django.clock import FakeClock
from millrace_django.engine import CancelReason, JobCancelled, JobContext, LogLine


@pytest.fixture
def context(clock: FakeClock) -> JobContext:
    return JobContext(job_id=uuid4(), attempt=2, tenant="acme", clock=clock)


def test_cancellation_fires_the_event_and_keeps_the_first_reason(context: JobContext) -> None:
    assert not context.cancelled.is_set()
    context.raise_if_cancelled()  # nothing yet
    context.cancel(CancelReason.TIMEOUT)
    context.cancel(CancelReason.SHUTDOWN)
    assert context.cancelled.is_set()
    assert context.cancel_reason is CancelReason.TIMEOUT
    with pytest.raises(JobCancelled, match="timeout"):
        context.raise_if_cancelled()


def test_progress_keeps_the_latest_fraction_or_object(context: JobContext) -> None:
    assert context.progress is None
    context.report_progress(0.25)
    context.report_progress(1)
    assert context.progress == 1.0
    context.report_progress({"done": 3, "total": 10})
    assert context.progress == {"done": 3, "total": 10}


@pytest.mark.parametrize("bad", [-0.1, 1.5, True, "half", float("nan")])
def test_progress_outside_zero_to_one_is_refused(context: JobContext, bad: object) -> None:
    with pytest.raises(ValueError, match=r"fraction in \[0, 1\]"):
        context.report_progress(bad)  # type: ignore[arg-type]


def test_progress_objects_must_be_json(context: JobContext) -> None:
    with pytest.raises(TypeError, match="set"):
        context.report_progress({"seen": {1, 2}})  # type: ignore[dict-item]


def test_log_lines_are_stamped_by_the_clock_and_buffered(
    context: JobContext, clock: FakeClock
) -> None:
    context.log("starting")
    clock.advance(timedelta(seconds=3))
    context.log("done")
    start = clock.now() - timedelta(seconds=3)
    assert context.logs == (LogLine(start, "starting"), LogLine(clock.now(), "done"))


def test_taking_the_report_hands_over_pending_output_once(context: JobContext) -> None:
    context.report_progress(0.5)
    context.log("one")
    first = context.take_report()
    assert (first.progress, [line.message for line in first.logs]) == (0.5, ["one"])
    second = context.take_report()
    assert (second.progress, second.logs) == (None, ())
    assert context.progress == 0.5  # the latest value stays readable
