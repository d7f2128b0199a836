"""Keeping claims alive, and learning when a running job must stop.

Each beat renews, in one call, the lease of every job this worker still runs (or has
yet to start), and of every job whose outcome was decided less than a lease ago but is
not written yet. The provider omits an id whose job was asked to cancel, or whose claim
is no longer ours; one read tells which. A failed read keeps the job running (the next
beat asks again). The beat also writes the progress and log lines jobs buffered since
the last one.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from millrace_django.clock import Clock
from millrace_django.contract import JobRecord, JobState, JobStorage
from millrace_django.engine import CancelReason
from millrace_django.runtime.execution import flush_progress
from millrace_django.runtime.inflight import Execution, InFlight

logger = logging.getLogger(__name__)


class Heartbeat:
    """One worker's lease renewal and cancel detection."""

    def __init__(
        self,
        storage: JobStorage,
        clock: Clock,
        in_flight: InFlight,
        *,
        worker_id: str,
        lease: timedelta,
    ) -> None:
        self._storage = storage
        self._clock = clock
        self._in_flight = in_flight
        self._worker_id = worker_id
        self._lease = lease

    def beat(self) -> None:
        """Renew, fire the cancellation of jobs that must stop, flush reports.

        An execution whose outcome is decided is renewed while its transition waits to
        be written, for one lease after the decision
        (:meth:`~millrace_django.runtime.inflight.Execution.renewable`): a completion
        queued behind other writes (on SQLite, behind every other writer's) does not
        lose its job to another worker, and one that cannot be written at all is still
        given up within two leases (retried until its lease ends), so a healthy
        heartbeat never keeps such a claim alive for good (Solid Queue #748)."""
        now = self._clock.now()
        held = self._in_flight.renewable(now, self._lease)
        if not held:
            return
        renewed_until = now + self._lease  # no later than the stored one
        renewed = self._storage.renew_leases(
            self._worker_id, [execution.job.id for execution in held], self._lease
        )
        for execution in held:
            if execution.job.id in renewed:
                execution.lease_until = renewed_until
            if execution.settled:
                continue  # decided meanwhile; the acknowledgement deals with it
            if execution.job.id not in renewed:
                self._disambiguate(execution)
            self._flush(execution)

    def _disambiguate(self, execution: Execution) -> None:
        try:
            stored = self._storage.get_job(execution.job.id)
        except Exception:
            logger.warning("cannot read job %s after a missed renewal", execution.job.id)
            return
        if stored is not None and self._still_ours(stored, execution):
            if stored.cancel_requested:
                execution.cancel(CancelReason.REQUESTED, self._clock.now())
            return
        logger.warning(
            "lost the lease of job %s (attempt %d); stopping it without a transition",
            execution.job.id,
            execution.job.attempt,
        )
        execution.cancel(CancelReason.LEASE_LOST, self._clock.now())

    def _still_ours(self, stored: JobRecord, execution: Execution) -> bool:
        return (
            stored.state is JobState.PROCESSING
            and stored.worker_id == self._worker_id
            and stored.attempt == execution.job.attempt
        )

    def _flush(self, execution: Execution) -> None:
        try:
            flush_progress(self._storage, execution.job, execution.context)
        except Exception:
            logger.warning("cannot store the progress of job %s", execution.job.id, exc_info=True)
