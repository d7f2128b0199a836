"""The jobs a worker holds: one :class:`Execution` per claimed attempt.

An execution is *settled* exactly once, by whoever gets there first: the thread that
ran the handler, or the worker abandoning it (its cancellation was ignored past the
grace, a newer attempt superseded it, or shutdown force-released it). The loser's
verdict is discarded. An execution keeps its slot until its transition is written, so
the heartbeat keeps renewing its lease meanwhile.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import datetime, timedelta
from uuid import UUID

from millrace_django.contract import JobRecord
from millrace_django.engine import CancelReason, JobContext


class Execution:
    """One claimed attempt of one job, as this worker runs it."""

    def __init__(self, job: JobRecord, context: JobContext, *, started_at: datetime) -> None:
        self.job = job
        self.context = context
        self.deadline = started_at + job.timeout if job.timeout is not None else None
        """When the timeout fires (clock time), if the job has one."""
        self._lock = threading.Lock()
        self._cancelled_at: datetime | None = None
        self._settled = False

    def __repr__(self) -> str:
        return f"<Execution {self.job.id} attempt {self.job.attempt}>"

    def cancel(self, reason: CancelReason, now: datetime) -> None:
        """Fire the job's cancellation; the first reason sticks, and the grace counts
        from the first call."""
        with self._lock:
            if self._cancelled_at is None:
                self._cancelled_at = now
        self.context.cancel(reason)

    def settle(self) -> bool:
        """Claim the right to decide this attempt's outcome; ``True`` only once."""
        with self._lock:
            won, self._settled = not self._settled, True
            return won

    @property
    def settled(self) -> bool:
        with self._lock:
            return self._settled

    def overran(self, now: datetime, grace: timedelta) -> bool:
        """Still unsettled ``grace`` after its cancellation fired."""
        with self._lock:
            cancelled_at, settled = self._cancelled_at, self._settled
        return not settled and cancelled_at is not None and now >= cancelled_at + grace


class InFlight:
    """The worker's executions by job id, and the slots they occupy (thread-safe)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._executions: dict[UUID, Execution] = {}
        self._changed = threading.Condition()

    def add(self, execution: Execution) -> Execution | None:
        """Track ``execution``; returns the older attempt of the same job it replaces
        (our own lease expired and we reclaimed the job), which the caller abandons."""
        with self._changed:
            previous = self._executions.get(execution.job.id)
            self._executions[execution.job.id] = execution
            return previous

    def remove(self, execution: Execution) -> None:
        """Free ``execution``'s slot (unless a newer attempt already took it over)."""
        with self._changed:
            if self._executions.get(execution.job.id) is execution:
                del self._executions[execution.job.id]
            self._changed.notify_all()

    def all(self) -> list[Execution]:
        with self._changed:
            return list(self._executions.values())

    def running(self) -> list[Execution]:
        """Executions whose outcome is not decided yet."""
        return [execution for execution in self.all() if not execution.settled]

    def count(self) -> int:
        with self._changed:
            return len(self._executions)

    def free(self) -> int:
        return max(self.capacity - self.count(), 0)

    def wait_until(self, predicate: Callable[[], bool], timeout: float) -> bool:
        """Block until ``predicate`` holds (re-checked whenever a slot frees or
        :meth:`notify` is called), at most ``timeout`` seconds."""
        with self._changed:
            return self._changed.wait_for(predicate, max(timeout, 0.0))

    def notify(self) -> None:
        """Re-check the predicates of :meth:`wait_until` (a stop was requested)."""
        with self._changed:
            self._changed.notify_all()
