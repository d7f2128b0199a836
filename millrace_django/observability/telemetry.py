"""What the engine and the runtime call to be observed; OpenTelemetry only if present.

- :func:`publish` stores new jobs; with tracing on, inside a PRODUCER span whose W3C
  ``traceparent`` each job carries to its worker.
- :class:`Observed` wraps one attempt: the job is the current job for logging (always)
  and, with tracing or metrics on, gets a CONSUMER span parented to its enqueue span,
  a duration, an outcome counter and (first attempts) its queue latency. The jobs its
  transition creates carry that span's context (:meth:`Observed.carry`).
- :func:`carry_trace` gives jobs stored without :func:`publish` the current span's
  context.
- :func:`watch_queue_depth` lets a worker's storage feed the ``millrace.queue.depth``
  gauge (read at most every :data:`DEPTH_INTERVAL` seconds).

Without ``opentelemetry-api`` nothing is imported and each call costs a branch. With
it, tracing and metrics follow the global providers (or those given to :func:`use`);
while none is configured, they are off at the same cost.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from functools import cache
from types import TracebackType
from typing import TYPE_CHECKING, Any
from uuid import UUID

from millrace_django.clock import Clock
from millrace_django.contract import JobRecord, JobStorage, JobTransition, TenantFilter
from millrace_django.observability.logs import _current_job

if TYPE_CHECKING:
    from millrace_django.observability.otel import Execution, Glue

logger = logging.getLogger(__name__)

DEPTH_INTERVAL = 15.0
"""Seconds a queue-depth reading is reused, however often the gauge is collected."""


@cache
def _glue() -> Glue | None:
    try:
        from millrace_django.observability.otel import Glue
    except ImportError:
        return None
    return Glue(_depths.read)


def use(tracer_provider: Any = None, meter_provider: Any = None) -> None:
    """Trace and measure with these providers instead of the global ones (``None``:
    the global one). For tests, and for processes that keep their providers private."""
    glue = _glue()
    if glue is None:
        raise RuntimeError("opentelemetry-api is not installed (pip install millrace-django[otel])")
    glue.use(tracer_provider, meter_provider)


def publish(storage: JobStorage, records: Sequence[JobRecord]) -> list[UUID]:
    """``storage.enqueue(records)``, in a PRODUCER span when tracing is on."""
    glue = _glue()
    tracer = glue.current()[0] if glue is not None and records else None
    if tracer is None or glue is None:
        return storage.enqueue(records)
    return glue.publish(tracer, storage, records)


def carry_trace(records: Sequence[JobRecord]) -> Sequence[JobRecord]:
    """``records`` continuing the current span's trace, for jobs stored by other calls
    than :func:`publish` (a workflow's start, a signal's resume job); unchanged while
    tracing is off or no span is current."""
    glue = _glue()
    if glue is None or not records or glue.current()[0] is None:
        return records
    return glue.carry(records)


class Observed:
    """Around one attempt of a claimed job (``with Observed(job, clock) as seen: ...;
    seen.end(transition, error)``)."""

    __slots__ = ("_clock", "_execution", "_job", "_token")

    def __init__(self, job: JobRecord, clock: Clock) -> None:
        self._job = job
        self._clock = clock
        self._execution: Execution | None = None

    def __enter__(self) -> Observed:
        self._token = _current_job.set(self._job)
        glue = _glue()
        if glue is not None:
            try:
                self._execution = glue.start(self._job, self._clock)
            except Exception:  # telemetry never stops a job
                logger.exception("cannot start the telemetry of job %s", self._job.id)
        return self

    def carry(self, transition: JobTransition | None) -> JobTransition | None:
        """``transition`` whose new jobs (workflow steps, a batch's callback, failure
        handlers) continue this attempt's trace; the same object while tracing is off."""
        execution = self._execution
        if execution is None or transition is None or not transition.enqueue:
            return transition
        try:
            return execution.carry(transition)
        except Exception:
            logger.exception("cannot carry the trace of job %s to its new jobs", self._job.id)
            return transition

    def end(self, transition: JobTransition | None, error: BaseException | None) -> None:
        """Record how the attempt ended (call once, inside the block)."""
        execution, self._execution = self._execution, None
        if execution is not None:
            try:
                execution.end(transition, error)
            except Exception:
                logger.exception("cannot record the telemetry of job %s", self._job.id)

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        if self._execution is not None:  # left without end(): the runner itself failed
            self.end(None, error)
        _current_job.reset(self._token)


# -- queue depth --------------------------------------------------------------------------


class _DepthSources:
    """Storages whose ready-job counts feed the gauge, read at most every
    :data:`DEPTH_INTERVAL` seconds (the last reading is reused in between)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sources: dict[
            int, tuple[JobStorage, Callable[[], AbstractContextManager[object]]]
        ] = {}
        self._read_at = -DEPTH_INTERVAL
        self._last: list[tuple[str, int]] = []

    def add(
        self, storage: JobStorage, around: Callable[[], AbstractContextManager[object]]
    ) -> Callable[[], None]:
        key = id(storage)
        with self._lock:
            self._sources[key] = (storage, around)
            self._read_at = -DEPTH_INTERVAL

        def remove() -> None:
            with self._lock:
                self._sources.pop(key, None)

        return remove

    def read(self) -> Iterable[tuple[str, int]]:
        with self._lock:
            if time.monotonic() - self._read_at < DEPTH_INTERVAL:
                return list(self._last)
            sources = list(self._sources.values())
            self._read_at = time.monotonic()
        counts: dict[str, int] = {}
        for storage, around in sources:
            statistics = getattr(storage, "get_statistics", None)
            if statistics is None:
                continue
            try:
                with around():
                    by_queue = statistics(TenantFilter.any()).enqueued_by_queue
            except Exception:
                logger.warning("cannot read queue depths for the gauge", exc_info=True)
                continue
            for queue, count in by_queue.items():
                # Several workers of one process usually share one database: the same
                # counts seen twice, not two backlogs to add up.
                counts[queue] = max(counts.get(queue, 0), count)
        with self._lock:
            self._last = sorted(counts.items())
            return list(self._last)


_depths = _DepthSources()


def watch_queue_depth(
    storage: JobStorage, around: Callable[[], AbstractContextManager[object]]
) -> Callable[[], None]:
    """Feed the queue-depth gauge from ``storage`` (read inside ``around``, the
    runtime's connection hygiene) until the returned function is called."""
    glue = _glue()
    if glue is not None:
        glue.current(fresh=True)  # the gauge exists from now on, not from the first job
    return _depths.add(storage, around)
