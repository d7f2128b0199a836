"""The job context: identity, cancellation, and buffered progress and logs."""

from __future__ import annotations

from datetime import timedelta
from uuid import uuid4

import pytest

from millrace_django.clock import FakeClock
from millrace_django.engine import CancelReason, JobCancelled, JobContext, LogLine
from millrace_django.engine.job_context import MAX_CHECKPOINT_BYTES


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


def saving_context(clock: FakeClock, saved: list[object], last: object = None) -> JobContext:
    """A context whose checkpoints land in ``saved`` (and are always stored)."""

    def save(data: object) -> bool:
        saved.append(data)
        return True

    return JobContext(
        job_id=uuid4(),
        attempt=2,
        tenant=None,
        clock=clock,
        last_checkpoint=last,  # type: ignore[arg-type]
        save_checkpoint=save,
    )


def test_a_checkpoint_is_saved_at_once_and_becomes_the_last_one(clock: FakeClock) -> None:
    saved: list[object] = []
    context = saving_context(clock, saved, last={"page": 3})
    assert context.last_checkpoint == {"page": 3}
    assert context.checkpoint({"page": 4}) is True
    assert saved == [{"page": 4}]
    assert context.last_checkpoint == {"page": 4}


def test_a_checkpoint_refused_by_the_fence_cancels_the_job(clock: FakeClock) -> None:
    context = JobContext(
        job_id=uuid4(), attempt=1, tenant=None, clock=clock, save_checkpoint=lambda data: False
    )
    assert context.checkpoint(5) is False
    assert context.last_checkpoint is None
    assert context.cancel_reason is CancelReason.LEASE_LOST


@pytest.mark.parametrize(
    ("bad", "error", "message"),
    [
        ({"at": (1, 2)}, TypeError, "tuple"),
        ("a\x00b", TypeError, "U\\+0000"),
        ("x" * (MAX_CHECKPOINT_BYTES + 1), ValueError, "over the limit"),
    ],
)
def test_a_checkpoint_json_cannot_store_is_refused_before_anything_is_written(
    clock: FakeClock, bad: object, error: type[Exception], message: str
) -> None:
    saved: list[object] = []
    context = saving_context(clock, saved)
    with pytest.raises(error, match=message):
        context.checkpoint(bad)  # type: ignore[arg-type]
    assert saved == []


def test_a_context_without_storage_says_it_cannot_checkpoint(context: JobContext) -> None:
    with pytest.raises(RuntimeError, match="no storage"):
        context.checkpoint(1)
