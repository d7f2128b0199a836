"""A job's last chance runs alone.

A job claimed more than ``interruption_limit`` times beyond its recorded failures is
presumed to crash its worker and is judged a poison pill without running
(:func:`~millrace_django.engine.outcomes.is_poison_pill`). A process that dies takes with
it every job it holds, and each is charged an interruption. So when a claim brings a job
that was interrupted before and whose next interruption would be its verdict (its *last
chance*), the worker runs it with nothing else in the process:

- the claim's other jobs that would run are given back at once (another worker may run
  them; below their last chance, they can afford the interruption a release counts as);
  those decided without running (a cancel request, an earlier poison verdict) go on;
- every last-chance job of the claim waits here, held (its lease renewed), never given
  back: a release is charged like a crash, so it would be its verdict;
- the claim loop claims nothing more; the first waiting job starts once nothing else is
  held (every running job finished and written), then the next, each alone;
- claiming resumes once the last of them is written.

A job never interrupted is no suspect, whatever the limit (with a limit of 1, every job
would otherwise run alone). Used by the claim loop's thread only.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterable

from millrace_django.contract import JobRecord
from millrace_django.engine import outcomes
from millrace_django.observability.logs import job_fields
from millrace_django.runtime.inflight import Execution, InFlight
from millrace_django.runtime.shutdown import StopRequests

logger = logging.getLogger(__name__)

type Release = Callable[[Iterable[Execution]], None]
"""Gives back executions that have not started (fenced, no retry budget spent)."""


def on_last_chance(job: JobRecord, interruption_limit: int) -> bool:
    """Interrupted before, and one more interruption makes it a poison pill; a job with
    a cancel request ends without running, so it is no risk."""
    claims = job.attempt - job.failures  # this claim and every earlier interruption
    return 1 < claims == interruption_limit and not job.cancel_requested


def will_run(job: JobRecord, interruption_limit: int) -> bool:
    """Whether the job's function will run: no cancel request, no poison verdict."""
    return not job.cancel_requested and not outcomes.is_poison_pill(job, interruption_limit)


class Quarantine:
    """The last-chance executions waiting to run alone, in claim order, and the one
    running."""

    def __init__(self, in_flight: InFlight, interruption_limit: int) -> None:
        self._in_flight = in_flight
        self._limit = interruption_limit
        self._waiting: deque[Execution] = deque()
        self._running: Execution | None = None

    @property
    def active(self) -> bool:
        """A last-chance job waits or runs: claim nothing."""
        return self._running is not None or bool(self._waiting)

    def screen(self, executions: list[Execution], release: Release) -> list[Execution]:
        """The executions of a claim to run now: all of them, unless one is on its last
        chance. Then the last-chance ones wait here, the others that would run are
        released, and those decided without running are returned."""
        limit = self._limit
        suspects: list[Execution] = []
        others: list[Execution] = []
        for execution in executions:
            (suspects if on_last_chance(execution.job, limit) else others).append(execution)
        if not suspects:
            return executions
        given_back = [e for e in others if will_run(e.job, limit)]
        release(given_back)
        self._waiting.extend(suspects)
        for execution in suspects:
            job = execution.job
            logger.warning(
                "job %s (%s) attempt %d is on its last chance (INTERRUPTION_LIMIT %d): "
                "it runs alone; %d other jobs of its claim given back",
                job.id,
                job.invocation.target,
                job.attempt,
                limit,
                len(given_back),
                extra=job_fields(job),
            )
        return [e for e in others if not will_run(e.job, limit)]

    def step(self, timeout: float, stops: StopRequests) -> Execution | None:
        """One bounded wait (at most ``timeout`` seconds, cut short by a stop request):
        for the running execution to be written or, if none runs, for nothing else to be
        held. Returns the execution whose turn came (the caller starts it), if any."""
        in_flight = self._in_flight
        running = self._running
        if running is not None:
            in_flight.wait_until(lambda: not in_flight.holds(running) or stops.requested, timeout)
            if not in_flight.holds(running):
                self._running = None
            return None
        while self._waiting and not in_flight.holds(self._waiting[0]):
            self._waiting.popleft()  # settled without running (cancelled, lease lost)
        if not self._waiting:
            return None
        in_flight.wait_until(lambda: self._alone() or stops.requested, timeout)
        if not self._alone():
            return None
        self._running = self._waiting.popleft()
        return self._running

    def take_waiting(self) -> list[Execution]:
        """The executions still waiting for their turn (shutdown gives them back)."""
        waiting = list(self._waiting)
        self._waiting.clear()
        return waiting

    def _alone(self) -> bool:
        """Nothing is held but the executions waiting here."""
        in_flight = self._in_flight
        return in_flight.count() <= sum(1 for e in self._waiting if in_flight.holds(e))
