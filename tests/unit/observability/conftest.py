"""The runtime tests' fixtures (fake clock, memory storage, a worker on a thread), and
OpenTelemetry providers that keep what they record in memory."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from millrace_django import observability
from tests.unit.runtime.conftest import clean_board, client, settings, start_worker

__all__ = ["clean_board", "client", "settings", "start_worker"]


@dataclass
class Telemetry:
    tracer_provider: TracerProvider
    spans: InMemorySpanExporter
    metrics: InMemoryMetricReader


@pytest.fixture
def telemetry() -> Iterator[Telemetry]:
    """SDK providers recording in memory, used instead of the (unset) global ones."""
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    observability.use(tracer_provider, meter_provider)
    yield Telemetry(tracer_provider, spans, reader)
    observability.use()
    tracer_provider.shutdown()
    meter_provider.shutdown()
