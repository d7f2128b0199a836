"""The jobs a worker holds: one :class:`Execution` per claimed attempt.

An execution is *held* from its claim until its transition is written (or dropped), so
the heartbeat renews its lease all that time, whether it still waits for a thread
(prefetched), runs, or waits for its acknowledgement (for at most one lease after its
outcome was decided: see :meth:`Execution.renewable`). Its thread is free again as soon
as the handler returns: a slot is a thread, not a lease.

An execution is *settled* exactly once, by whoever gets there first: the thread that
ran the handler, or the worker deciding without it (its cancellation was ignored past
the grace, a newer attempt superseded it, shutdown force-released it, or it was
released before it started). The loser's verdict is discarded. A settled execution
that has not started never starts.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta

from millrace_django.clock import Clock
from millrace_django.contract import JobRecord
from millrace_django.engine import CancelReason, JobContext


class Execution:
    """One claimed attempt of one job, as this worker runs it."""

    __slots__ = (
        "_cancelled_at",
        "_lock",
        "_settled",
        "_settled_at",
        "_started",
        "context",
        "deadline",
        "job",
        "lease_until",
    )

    def __init__(self, job: JobRecord, context: JobContext) -> None:
        self.job = job
        self.context = context
        self.deadline: datetime | None = None
        """When the timeout fires (clock time), if the job has one and has started."""
        self.lease_until = job.lease_until
        """When the claim lapses at the latest (clock time), as of its last renewal: a
        transition that cannot be written by then is given up (the job will run again)."""
        self._lock = threading.Lock()
        self._cancelled_at: datetime | None = None
        self._settled = False
        self._settled_at: datetime | None = None
        self._started = False

    def __repr__(self) -> str:
        return f"<Execution {self.job.id} attempt {self.job.attempt}>"

    def begin(self, clock: Clock) -> bool:
        """Mark the handler as starting now (its timeout counts from here); ``False``
        if the attempt was already settled without it, and must not run."""
        with self._lock:
            if self._settled:
                return False
            self._started = True
        if self.job.timeout is not None:
            self.deadline = clock.now() + self.job.timeout
        return True

    @property
    def started(self) -> bool:
        with self._lock:
            return self._started

    def missed_deadline(self, now: datetime, lease: timedelta) -> bool:
        """Claimed (with ``lease``) before the job's deadline, which has come by ``now``:
        it waited here for a thread too long and must not start. A claim made after the
        deadline took up an interrupted attempt, which may run (it had started)."""
        expires_at, leased_until = self.job.expires_at, self.job.lease_until
        if expires_at is None or now < expires_at:
            return False
        return leased_until is None or leased_until - lease < expires_at

    def cancel(self, reason: CancelReason, now: datetime) -> None:
        """Fire the job's cancellation; the first reason sticks, and the grace counts
        from the first call."""
        with self._lock:
            if self._cancelled_at is None:
                self._cancelled_at = now
        self.context.cancel(reason)

    def settle(self, now: datetime | None = None) -> bool:
        """Claim the right to decide this attempt's outcome; ``True`` only once. ``now``
        (the clock's) is when the outcome was decided, from which its transition's claim
        is kept alive for a while (see :meth:`renewable`)."""
        with self._lock:
            won, self._settled = not self._settled, True
            if won:
                self._settled_at = now
            return won

    def renewable(self, now: datetime, window: timedelta) -> bool:
        """Whether the heartbeat renews this claim at ``now``: the outcome is not
        decided yet, or it was decided (at :meth:`settle`) less than ``window`` ago and
        its transition waits to be written. Writes queue behind each other (on SQLite,
        behind every other writer), so a completion may wait longer than what was left
        of its lease; renewing it meanwhile keeps another worker from running the job
        again. Only for ``window``: a completion that cannot be written at all must
        not be kept alive by a healthy heartbeat (Solid Queue #748), so its claim lapses
        at most ``window`` plus one lease after it was decided."""
        with self._lock:
            if not self._settled:
                return True
            settled_at = self._settled_at
        return settled_at is not None and now < settled_at + window

    def settle_unstarted(self) -> bool:
        """Like :meth:`settle`, but only while the handler has not started (it then
        never will); ``False`` once it has."""
        with self._lock:
            if self._settled or self._started:
                return False
            self._settled = True
            return True

    @property
    def settled(self) -> bool:
        with self._lock:
            return self._settled

    @property
    def cancelled(self) -> bool:
        with self._lock:
            return self._cancelled_at is not None

    def overran(self, now: datetime, grace: timedelta) -> bool:
        """Started, still unsettled ``grace`` after its cancellation fired."""
        with self._lock:
            cancelled_at, settled, started = self._cancelled_at, self._settled, self._started
        return started and not settled and cancelled_at is not None and now >= cancelled_at + grace


class InFlight:
    """The worker's executions by job id, from claim to acknowledgement (thread-safe)."""

    def __init__(self) -> None:
        self._executions: dict[int, Execution] = {}
        """By ``job.id.int``: an int hashes in C, a UUID in Python (twice per job here)."""
        self._changed = threading.Condition()  # reentrant: predicates call count()
        self._watchers = 0

    def add_all(self, executions: Iterable[Execution]) -> list[Execution]:
        """Track ``executions``; returns the older attempts of the same jobs they
        replace (our own lease expired and we reclaimed the job), which the caller
        settles."""
        replaced = []
        with self._changed:
            held = self._executions
            for execution in executions:
                key = execution.job.id.int
                previous = held.get(key)
                held[key] = execution
                if previous is not None:
                    replaced.append(previous)
        return replaced

    def add(self, execution: Execution) -> Execution | None:
        """Track one execution (see :meth:`add_all`)."""
        replaced = self.add_all((execution,))
        return replaced[0] if replaced else None

    def remove_all(self, executions: Iterable[Execution]) -> None:
        """Stop holding ``executions`` (except those a newer attempt took over)."""
        with self._changed:
            held = self._executions
            for execution in executions:
                key = execution.job.id.int
                if held.get(key) is execution:
                    del held[key]
            if self._watchers:
                self._changed.notify_all()

    def remove(self, execution: Execution) -> None:
        """Stop holding ``execution`` (unless a newer attempt already took over)."""
        self.remove_all((execution,))

    def holds(self, execution: Execution) -> bool:
        """Whether ``execution`` is still held (not written, nor taken over by a newer
        attempt)."""
        with self._changed:
            return self._executions.get(execution.job.id.int) is execution

    def all(self) -> list[Execution]:
        with self._changed:
            return list(self._executions.values())

    def running(self) -> list[Execution]:
        """Executions whose outcome is not decided yet (started or not)."""
        return [execution for execution in self.all() if not execution.settled]

    def renewable(self, now: datetime, window: timedelta) -> list[Execution]:
        """Executions the heartbeat renews at ``now`` (see :meth:`Execution.renewable`)."""
        return [execution for execution in self.all() if execution.renewable(now, window)]

    def count(self) -> int:
        with self._changed:
            return len(self._executions)

    def wait_until(self, predicate: Callable[[], bool], timeout: float) -> bool:
        """Block until ``predicate`` holds (re-checked whenever an execution is removed
        or :meth:`notify` is called), at most ``timeout`` seconds."""
        with self._changed:
            self._watchers += 1
            try:
                return self._changed.wait_for(predicate, max(timeout, 0.0))
            finally:
                self._watchers -= 1

    def notify(self) -> None:
        """Re-check the predicates of :meth:`wait_until` (a stop was requested)."""
        with self._changed:
            self._changed.notify_all()
