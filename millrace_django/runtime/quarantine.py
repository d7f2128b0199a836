"""A job's last chance runs alone.

A job claimed more than ``interruption_limit`` times beyond its recorded failures is
presumed to crash its worker and is judged a poison pill without running
(:func:`~millrace_django.engine.outcomes.is_poison_pill`). A process that dies takes with
it every job it holds, and each is charged an interruption. So when a claim brings a job
that was interrupted before and whose next interruption would be its verdict (its *last
chance*), the worker runs it with nothing else in the process:

- the first such job of the claim is kept; every other job of the claim that would run,
  other last-chance ones included, is given back at once, its attempt with it (it never
  started, so it is no interruption), and another worker may run it; those decided
  without running (a cancel request, an earlier poison verdict) go on;
- the claim loop claims nothing more; the kept job starts once nothing else is held
  (every running job finished and written);
- claiming resumes once it is written.

A job never interrupted is no suspect, whatever the limit (with a limit of 1, every job
would otherwise run alone). Used by the claim loop's thread only.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from millrace_django.contract import JobRecord
from millrace_django.engine import outcomes
from millrace_django.observability.logs import job_fields
from millrace_django.runtime.inflight import Execution, InFlight
from millrace_django.runtime.shutdown import StopRequests

logger = logging.getLogger(__name__)

type GiveBack = Callable[[Iterable[Execution]], None]
"""Gives back executions that have not started, attempt and all (fenced, uncharged)."""


def on_last_chance(job: JobRecord, interruption_limit: int) -> bool:
    """Interrupted before, and one more interruption makes it a poison pill; a job with
    a cancel request ends without running, so it is no risk."""
    claims = job.attempt - job.failures  # this claim and every earlier interruption
    return 1 < claims == interruption_limit and not job.cancel_requested


def will_run(job: JobRecord, interruption_limit: int) -> bool:
    """Whether the job's function will run: no cancel request, no poison verdict."""
    return not job.cancel_requested and not outcomes.is_poison_pill(job, interruption_limit)


class Quarantine:
    """The last-chance execution kept to run alone, from its claim until it is written."""

    def __init__(self, in_flight: InFlight, interruption_limit: int) -> None:
        self._in_flight = in_flight
        self._limit = interruption_limit
        self._kept: Execution | None = None
        self._started = False
        """The kept execution has been handed to its pool."""

    @property
    def active(self) -> bool:
        """A last-chance job waits or runs: claim nothing."""
        return self._kept is not None

    def screen(self, executions: list[Execution], give_back: GiveBack) -> list[Execution]:
        """The executions of a claim to run now: all of them, unless one is on its last
        chance. Then the first such one is kept here, every other one that would run is
        given back, and those decided without running are returned."""
        limit = self._limit
        kept = next((e for e in executions if on_last_chance(e.job, limit)), None)
        if kept is None:
            return executions
        others = [e for e in executions if e is not kept]
        given_back = [e for e in others if will_run(e.job, limit)]
        give_back(given_back)
        self._kept, self._started = kept, False
        job = kept.job
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
        for nothing but the kept execution to be held or, once it started, for it to be
        written. Returns the kept execution when its turn comes (the caller starts it)."""
        in_flight, kept = self._in_flight, self._kept
        if kept is None:
            return None
        if self._started:
            in_flight.wait_until(lambda: not in_flight.holds(kept) or stops.requested, timeout)
        else:
            # Nothing is claimed meanwhile, so the count only falls: to 1, the kept one.
            in_flight.wait_until(lambda: in_flight.count() <= 1 or stops.requested, timeout)
        if not in_flight.holds(kept):  # written, or settled without running (cancelled)
            self._kept = None
            return None
        if self._started or in_flight.count() > 1:
            return None
        self._started = True
        return kept

    def take_waiting(self) -> list[Execution]:
        """The kept execution if it still waits for its turn (shutdown gives it back)."""
        kept = self._kept
        if kept is None or self._started:
            return []
        self._kept = None
        return [kept]
