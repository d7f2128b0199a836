"""With OpenTelemetry on, enqueue and execution form one trace, and attempts are measured."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import nullcontext
from datetime import timedelta
from pathlib import Path
from typing import Any

from opentelemetry.sdk.metrics.export import HistogramDataPoint, NumberDataPoint
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode

from millrace_django import observability
from millrace_django.clock import FakeClock
from millrace_django.contract import JobState
from millrace_django.engine import EngineSettings, JobClient, Retry
from millrace_django.observability.telemetry import watch_queue_depth
from millrace_django.storage.memory import MemoryStorage
from millrace_django.testing import JobRunner
from tests.unit.observability import jobs
from tests.unit.observability.conftest import Telemetry
from tests.unit.runtime.conftest import StartWorker
from tests.unit.runtime.helpers import stored, wait_for_state, wait_until
from tests.unit.workflow import flows


def spans(telemetry: Telemetry, kind: SpanKind) -> list[ReadableSpan]:
    return [span for span in telemetry.spans.get_finished_spans() if span.kind is kind]


def traceparent_of(span: ReadableSpan) -> str:
    """The W3C ``traceparent`` naming ``span`` as the parent."""
    context = span.get_span_context()
    assert context is not None
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{context.trace_flags:02x}"


def points(telemetry: Telemetry, name: str) -> Iterator[Any]:
    data = telemetry.metrics.get_metrics_data()
    for resource in data.resource_metrics if data is not None else ():
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name == name:
                    yield from metric.data.data_points


def test_the_execution_span_continues_the_trace_of_the_enqueue_that_created_the_job(
    client: JobClient,
    storage: MemoryStorage,
    start_worker: StartWorker,
    telemetry: Telemetry,
) -> None:
    tracer = telemetry.tracer_provider.get_tracer("a web request")
    with tracer.start_as_current_span("POST /orders") as request:
        job_id = jobs.note_span.using(queue="emails").enqueue()
    trace_parent = stored(storage, job_id).trace_parent
    start_worker(worker_id="w-1")
    wait_for_state(storage, job_id, JobState.SUCCEEDED)
    wait_until(lambda: spans(telemetry, SpanKind.CONSUMER), "the execution span")

    (send,) = spans(telemetry, SpanKind.PRODUCER)
    (process,) = spans(telemetry, SpanKind.CONSUMER)
    trace_id = request.get_span_context().trace_id
    assert send.parent is not None and send.parent.span_id == request.get_span_context().span_id
    assert trace_parent == traceparent_of(send)
    assert process.parent is not None and process.parent.span_id == send.context.span_id
    assert {send.context.trace_id, process.context.trace_id} == {trace_id}
    assert send.name == f"send {jobs.note_span.target}"
    assert process.name == f"process {jobs.note_span.target}"
    assert dict(send.attributes or {}) == {
        "messaging.system": "millrace",
        "messaging.operation.type": "send",
        "messaging.operation.name": "send",
        "messaging.destination.name": "emails",
        "millrace.job.name": jobs.note_span.target,
        "messaging.message.id": str(job_id),
    }
    assert dict(process.attributes or {}) == {
        "messaging.system": "millrace",
        "messaging.destination.name": "emails",
        "millrace.job.name": jobs.note_span.target,
        "messaging.operation.type": "process",
        "messaging.operation.name": "process",
        "messaging.message.id": str(job_id),
        "millrace.job.attempt": 1,
        "millrace.worker.id": "w-1",
        "millrace.job.outcome": "succeeded",
    }
    # The job's own code runs inside the execution span (its spans and logs nest there).
    assert jobs.seen_spans[-1] == (trace_id, process.context.span_id)


def test_a_batch_is_one_send_span_whose_context_every_job_carries(
    client: JobClient, storage: MemoryStorage, telemetry: Telemetry
) -> None:
    with client.batch() as batch:
        batch.enqueue(jobs.chatty, "a")
        batch.enqueue(jobs.chatty.using(queue="emails"), "b")
    (send,) = spans(telemetry, SpanKind.PRODUCER)
    assert send.name == "send"
    assert (send.attributes or {})["messaging.batch.message_count"] == 2
    assert "messaging.destination.name" not in (send.attributes or {})
    parents = {stored(storage, job_id).trace_parent for job_id in batch.ids}
    assert parents == {traceparent_of(send)}


def test_a_dead_job_ends_its_span_in_error_with_the_exception_recorded(
    client: JobClient,
    storage: MemoryStorage,
    start_worker: StartWorker,
    telemetry: Telemetry,
) -> None:
    job_id = jobs.doomed.enqueue()
    start_worker()
    wait_for_state(storage, job_id, JobState.DEAD)
    wait_until(lambda: spans(telemetry, SpanKind.CONSUMER), "the execution span")
    (process,) = spans(telemetry, SpanKind.CONSUMER)
    assert process.status.status_code is StatusCode.ERROR
    assert "ValueError: never works" in (process.status.description or "")
    assert (process.attributes or {})["millrace.job.outcome"] == "dead"
    (event,) = process.events
    assert event.name == "exception"
    assert (event.attributes or {})["exception.type"] == "ValueError"


def test_outcomes_durations_and_queue_latency_are_measured(
    client: JobClient,
    storage: MemoryStorage,
    clock: FakeClock,
    start_worker: StartWorker,
    telemetry: Telemetry,
) -> None:
    done = [jobs.chatty.enqueue("one"), jobs.chatty.enqueue("two")]
    retried = jobs.wobbly.enqueue()
    dead = jobs.doomed.using(queue="emails").enqueue()
    clock.advance(timedelta(seconds=3))  # every job waits 3 s (fake time) for the worker
    start_worker()
    for job_id in done:
        wait_for_state(storage, job_id, JobState.SUCCEEDED)
    wait_for_state(storage, retried, JobState.FAILED)
    wait_for_state(storage, dead, JobState.DEAD)
    wait_until(
        lambda: sum(p.count for p in points(telemetry, "millrace.job.duration")) == 4,
        "four durations",
    )

    completed = [p for p in points(telemetry, "millrace.jobs.completed")]
    assert [(p.value, p.attributes["millrace.job.name"]) for p in completed] == [
        (2, jobs.chatty.target)
    ]
    failed = {
        (p.attributes["millrace.job.outcome"], p.attributes["messaging.destination.name"]): p.value
        for p in points(telemetry, "millrace.jobs.failed")
    }
    assert failed == {("failed", "default"): 1, ("dead", "emails"): 1}
    latency: list[HistogramDataPoint] = list(points(telemetry, "millrace.job.queue_latency"))
    assert sum(p.count for p in latency) == 4
    assert sum(p.sum for p in latency) == 4 * 3.0
    durations = {
        p.attributes["millrace.job.outcome"]: p.count
        for p in points(telemetry, "millrace.job.duration")
    }
    assert durations == {"succeeded": 2, "failed": 1, "dead": 1}


def test_the_queue_depth_gauge_reads_the_storage_at_most_every_interval(
    client: JobClient, storage: MemoryStorage, telemetry: Telemetry
) -> None:
    unwatch = watch_queue_depth(storage, nullcontext)
    try:
        jobs.chatty.using(queue="emails").enqueue("a")
        jobs.chatty.using(queue="emails").enqueue("b")
        first: list[NumberDataPoint] = list(points(telemetry, "millrace.queue.depth"))
        jobs.chatty.enqueue("c")  # within the interval: the reading is reused
        second: list[NumberDataPoint] = list(points(telemetry, "millrace.queue.depth"))
    finally:
        unwatch()
    for reading in (first, second):
        assert [
            (dict(p.attributes or {})["messaging.destination.name"], p.value) for p in reading
        ] == [("emails", 2)]


def test_without_a_configured_provider_jobs_carry_no_trace_context(
    client: JobClient, storage: MemoryStorage
) -> None:
    observability.use()  # the global providers, which nothing configured in this process
    job_id = jobs.chatty.enqueue("untraced")
    assert stored(storage, job_id).trace_parent is None


def test_the_jobs_a_running_job_creates_continue_its_trace(telemetry: Telemetry) -> None:
    """A workflow started in a request is one trace: each step's job is created by the
    previous step's transition, as a child of that step's execution span."""
    runner = JobRunner(config=EngineSettings(default_retry=Retry.none()))
    tracer = telemetry.tracer_provider.get_tracer("a web request")
    with tracer.start_as_current_span("POST /orders") as request:
        runner.workflows.start(flows.LINEAR, {})
    runner.run_until_idle()

    steps = spans(telemetry, SpanKind.CONSUMER)
    assert len(steps) == 3
    assert {span.context.trace_id for span in steps} == {request.get_span_context().trace_id}
    parents = [span.parent.span_id if span.parent else None for span in steps]
    expected = [request.get_span_context().span_id] + [span.context.span_id for span in steps]
    assert parents == expected[:3]


def test_a_workflow_wait_that_times_out_stays_in_the_trace(telemetry: Telemetry) -> None:
    """The timer is created by a step's transition, and the resume job by the timer."""
    runner = JobRunner(config=EngineSettings(default_retry=Retry.none()))
    tracer = telemetry.tracer_provider.get_tracer("a web request")
    with tracer.start_as_current_span("POST /orders") as request:
        runner.workflows.start(flows.WAIT_WITH_TIMEOUT, {"key": "k"})
    runner.run_until_idle()
    runner.advance(timedelta(minutes=30))
    runner.run_until_idle()

    executions = spans(telemetry, SpanKind.CONSUMER)
    assert len(executions) == 5  # first, the timer, the resume, expire, second
    assert {span.context.trace_id for span in executions} == {request.get_span_context().trace_id}


def test_a_signal_resumes_a_workflow_in_the_trace_of_whoever_sent_it(
    telemetry: Telemetry,
) -> None:
    runner = JobRunner(config=EngineSettings(default_retry=Retry.none()))
    tracer = telemetry.tracer_provider.get_tracer("a web request")
    runner.workflows.start(flows.WAIT_FIRST, {"order_id": "o-1"})
    with tracer.start_as_current_span("POST /approvals") as request:
        assert runner.workflows.signal("approval", "o-1", {"approved": True, "by": "ann"})
    runner.run_until_idle()

    resume, ship = spans(telemetry, SpanKind.CONSUMER)
    assert resume.parent is not None
    assert resume.parent.span_id == request.get_span_context().span_id
    assert ship.parent is not None and ship.parent.span_id == resume.context.span_id


def test_a_dead_jobs_failure_observer_continues_its_trace(telemetry: Telemetry) -> None:
    runner = JobRunner(config=EngineSettings(default_retry=Retry.none()))
    with runner.installed():
        jobs.doomed_and_observed.enqueue()
    runner.run_until_idle(throw_on_failure=False)

    dead, observer = spans(telemetry, SpanKind.CONSUMER)
    assert observer.name == f"process {jobs.chatty.target}"
    assert observer.parent is not None and observer.parent.span_id == dead.context.span_id


WITHOUT_OPENTELEMETRY = """
import sys
sys.modules["opentelemetry"] = None  # every import of it fails, as when it is not installed
from millrace_django import observability
from millrace_django.contract import JobState
from millrace_django.testing import JobRunner
from tests.unit.runtime import jobs
runner = JobRunner()
with runner.installed():
    jobs.record.enqueue("x")
runner.run_until_idle()
assert [job.state for job in runner.jobs()] == [JobState.SUCCEEDED]
try:
    observability.use()
except RuntimeError as error:
    print(error)
"""


def test_without_opentelemetry_installed_jobs_run_and_use_says_what_is_missing() -> None:
    """``opentelemetry-api`` is an optional extra: nothing may need it."""
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_OPENTELEMETRY],
        cwd=Path(__file__).resolve().parents[3],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == (
        "opentelemetry-api is not installed (pip install millrace-django[otel])"
    )
