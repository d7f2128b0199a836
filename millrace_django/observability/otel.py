"""The OpenTelemetry side of :mod:`.telemetry`; importing it needs ``opentelemetry-api``.

Spans and attribute names follow the messaging semantic conventions where they fit
(``messaging.system="millrace"``, the queue as ``messaging.destination.name``, the job
id as ``messaging.message.id``); what is Millrace's own is under ``millrace.``. The trace
context travels in the job row as a W3C ``traceparent`` (the ``trace_parent`` column),
whatever propagator the process has configured globally.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from contextvars import Token
from dataclasses import dataclass, replace
from uuid import UUID

from opentelemetry import context as otel_context
from opentelemetry import metrics, trace
from opentelemetry.context import Context
from opentelemetry.metrics import CallbackOptions, Counter, Histogram, MeterProvider, Observation
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer, TracerProvider
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from opentelemetry.util.types import AttributeValue

from millrace_django.clock import Clock
from millrace_django.contract import JobRecord, JobState, JobStorage, JobTransition

SYSTEM = "millrace"
SCOPE = "millrace_django"
RECHECK = 1.0
"""Seconds the providers in use are remembered before the API is asked again."""

_W3C = TraceContextTextMapPropagator()
_FAILURES = frozenset({JobState.FAILED, JobState.DEAD})

type Attributes = dict[str, AttributeValue]
type DepthReader = Callable[[], Iterable[tuple[str, int]]]


def _configured_tracer_provider(provider: TracerProvider) -> bool:
    return not isinstance(provider, trace.ProxyTracerProvider | trace.NoOpTracerProvider)


def _configured_meter_provider(provider: MeterProvider) -> bool:
    # The API's stand-in before a provider is set is the private _ProxyMeterProvider.
    return not isinstance(provider, metrics.NoOpMeterProvider) and (
        type(provider).__name__ != "_ProxyMeterProvider"
    )


@dataclass(frozen=True, slots=True)
class Instruments:
    """What an attempt records into, created once per meter provider (the depth gauge
    is not here: the provider calls it back)."""

    completed: Counter
    failed: Counter
    duration: Histogram
    queue_latency: Histogram


class Glue:
    """Tracer and instruments of the providers in use (the global ones unless
    :meth:`use` named others), each created once per provider.

    Asking the API for the global providers costs microseconds while none is set (it
    reads the environment each time), so the answer is kept for :data:`RECHECK`
    seconds: a provider configured after start-up is picked up within that delay. The
    refresh is locked, so pool threads racing at start-up create the instruments (and
    register the depth callback) once.
    """

    def __init__(self, depths: DepthReader) -> None:
        self._depths = depths
        self._tracer_provider: TracerProvider | None = None
        self._meter_provider: MeterProvider | None = None
        self._tracer: tuple[TracerProvider, Tracer] | None = None
        self._instruments: tuple[MeterProvider, Instruments] | None = None
        self._current: tuple[Tracer | None, Instruments | None] = (None, None)
        self._checked_at = -math.inf
        self._lock = threading.Lock()

    def use(
        self, tracer_provider: TracerProvider | None, meter_provider: MeterProvider | None
    ) -> None:
        """Use these providers (``None``: the global one) from the next call on."""
        with self._lock:
            self._tracer_provider = tracer_provider
            self._meter_provider = meter_provider
            self._checked_at = -math.inf

    def current(self, *, fresh: bool = False) -> tuple[Tracer | None, Instruments | None]:
        """The tracer and instruments to use now (``None`` for what is off)."""
        if fresh or time.monotonic() - self._checked_at >= RECHECK:
            with self._lock:
                now = time.monotonic()
                if fresh or now - self._checked_at >= RECHECK:
                    self._current = (self._resolve_tracer(), self._resolve_instruments())
                    self._checked_at = now
        return self._current

    def _resolve_tracer(self) -> Tracer | None:
        provider = self._tracer_provider or trace.get_tracer_provider()
        if not _configured_tracer_provider(provider):
            return None
        if self._tracer is None or self._tracer[0] is not provider:
            self._tracer = (provider, provider.get_tracer(SCOPE))
        return self._tracer[1]

    def _resolve_instruments(self) -> Instruments | None:
        provider = self._meter_provider or metrics.get_meter_provider()
        if not _configured_meter_provider(provider):
            return None
        if self._instruments is None or self._instruments[0] is not provider:
            self._instruments = (provider, self._create(provider))
        return self._instruments[1]

    def _create(self, provider: MeterProvider) -> Instruments:
        meter = provider.get_meter(SCOPE)
        meter.create_observable_gauge(
            "millrace.queue.depth",
            callbacks=[self._observe_depths],
            unit="{job}",
            description="Jobs ready to run (enqueued), per queue",
        )
        return Instruments(
            completed=meter.create_counter(
                "millrace.jobs.completed", unit="{job}", description="Executions that succeeded"
            ),
            failed=meter.create_counter(
                "millrace.jobs.failed",
                unit="{job}",
                description="Executions that failed (millrace.job.outcome: failed, to be "
                "retried, or dead)",
            ),
            duration=meter.create_histogram(
                "millrace.job.duration", unit="s", description="Execution time of one attempt"
            ),
            queue_latency=meter.create_histogram(
                "millrace.job.queue_latency",
                unit="s",
                description="From a job's creation to the start of its first attempt",
            ),
        )

    def _observe_depths(self, options: CallbackOptions) -> Iterable[Observation]:
        return [
            Observation(count, {"messaging.system": SYSTEM, "messaging.destination.name": queue})
            for queue, count in self._depths()
        ]

    # -- producing ------------------------------------------------------------------------

    def publish(
        self, tracer: Tracer, storage: JobStorage, records: Sequence[JobRecord]
    ) -> list[UUID]:
        """Enqueue ``records`` inside a PRODUCER span whose context each record carries."""
        first = records[0]
        attributes: Attributes = {
            "messaging.system": SYSTEM,
            "messaging.operation.type": "send",
            "messaging.operation.name": "send",
        }
        queues = {record.queue for record in records}
        if len(queues) == 1:
            attributes["messaging.destination.name"] = first.queue
        single = len(records) == 1
        if single:
            attributes["millrace.job.name"] = first.invocation.target
        else:
            attributes["messaging.batch.message_count"] = len(records)
        name = f"send {first.invocation.target}" if single else "send"
        with tracer.start_as_current_span(
            name, kind=SpanKind.PRODUCER, attributes=attributes
        ) as span:
            ids = storage.enqueue(carrying(records, traceparent(span)))
            if single:
                span.set_attribute("messaging.message.id", str(ids[0]))
            return ids

    def carry(self, records: Sequence[JobRecord]) -> Sequence[JobRecord]:
        """``records`` continuing the current span's trace (none current: unchanged)."""
        return carrying(records, traceparent(trace.get_current_span()))

    # -- consuming ------------------------------------------------------------------------

    def start(self, job: JobRecord, clock: Clock) -> Execution | None:
        """Open the CONSUMER span of one attempt (current until :meth:`Execution.end`)
        and record its queue latency; ``None`` when neither traces nor metrics are on."""
        tracer, instruments = self.current()
        if tracer is None and instruments is None:
            return None
        attributes: Attributes = {
            "messaging.system": SYSTEM,
            "messaging.destination.name": job.queue,
            "millrace.job.name": job.invocation.target,
        }
        if instruments is not None and job.attempt == 1:
            waited = (clock.now() - job.created_at).total_seconds()
            instruments.queue_latency.record(max(waited, 0.0), attributes)
        span: Span | None = None
        token: Token[Context] | None = None
        if tracer is not None:
            parent = _W3C.extract({"traceparent": job.trace_parent}) if job.trace_parent else None
            span_attributes: Attributes = {
                **attributes,
                "messaging.operation.type": "process",
                "messaging.operation.name": "process",
                "messaging.message.id": str(job.id),
                "millrace.job.attempt": job.attempt,
            }
            if job.worker_id is not None:
                span_attributes["millrace.worker.id"] = job.worker_id
            if job.tenant_id is not None:
                span_attributes["millrace.tenant.id"] = job.tenant_id
            span = tracer.start_span(
                f"process {job.invocation.target}",
                context=parent,
                kind=SpanKind.CONSUMER,
                attributes=span_attributes,
            )
            token = otel_context.attach(trace.set_span_in_context(span))
        return Execution(span, token, instruments, attributes)


def traceparent(span: Span) -> str | None:
    """The W3C ``traceparent`` naming ``span`` as the parent (``None``: an invalid span,
    as when nothing is being traced)."""
    carrier: dict[str, str] = {}
    _W3C.inject(carrier, context=trace.set_span_in_context(span))
    return carrier.get("traceparent")


def carrying(records: Sequence[JobRecord], parent: str | None) -> Sequence[JobRecord]:
    """``records``, those without a trace context given ``parent``; the same sequence
    when there is nothing to give."""
    if parent is None or all(record.trace_parent for record in records):
        return records
    return [
        record if record.trace_parent else replace(record, trace_parent=parent)
        for record in records
    ]


class Execution:
    """One attempt being observed: its span (if tracing) and the metrics to record."""

    __slots__ = ("_attributes", "_instruments", "_span", "_started", "_token")

    def __init__(
        self,
        span: Span | None,
        token: Token[Context] | None,
        instruments: Instruments | None,
        attributes: Attributes,
    ) -> None:
        self._span = span
        self._token = token
        self._instruments = instruments
        self._attributes = attributes
        self._started = time.perf_counter()

    def carry(self, transition: JobTransition) -> JobTransition:
        """``transition`` whose new jobs continue this attempt's trace, as children of
        its span (jobs that already carry a trace context keep theirs)."""
        if self._span is None:
            return transition
        enqueue = carrying(transition.enqueue, traceparent(self._span))
        return transition if enqueue is transition.enqueue else replace(transition, enqueue=enqueue)

    def end(self, transition: JobTransition | None, error: BaseException | None) -> None:
        """Close the span with the outcome and record the duration and counters."""
        elapsed = time.perf_counter() - self._started
        target = transition.target if transition is not None else None
        outcome = target.value if target is not None else "lost"
        span = self._span
        if span is not None:
            span.set_attribute("millrace.job.outcome", outcome)
            if error is not None:
                span.record_exception(error)
            if target in _FAILURES:
                detail = transition.error if transition is not None else None
                span.set_status(Status(StatusCode.ERROR, detail))
            span.end()
            if self._token is not None:
                otel_context.detach(self._token)
        instruments = self._instruments
        if instruments is not None:
            attributes = {**self._attributes, "millrace.job.outcome": outcome}
            instruments.duration.record(elapsed, attributes)
            if target is JobState.SUCCEEDED:
                instruments.completed.add(1, self._attributes)
            elif target in _FAILURES:
                instruments.failed.add(1, attributes)
