"""Running until the work due within a bound has finished (``millrace_worker
--until-done``), for tests and scripts.

``--until-idle`` stops at the first moment nothing is claimable, which leaves a retry
due in a second, or a job scheduled a minute ahead, unrun. Here the worker (and its
scheduler) keep going until every job of the worker's queues that is due by the
deadline has finished: none is ready, running, or scheduled or awaiting a retry due by
then. What is due later is not waited for. A continuation waits for its parent, which
is counted while it is due; a recurring definition counts once an occurrence has fired
(it is a job then). If the deadline passes first, the worker stops and the watch says
what was still unfinished.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection
from dataclasses import dataclass
from datetime import datetime

from millrace_django.clock import Clock
from millrace_django.contract import JobQuery, JobState, JobSummary, MonitoringStorage
from millrace_django.runtime.hooks import Hooks, daemon_thread
from millrace_django.runtime.job_pool import JOIN_TIMEOUT

logger = logging.getLogger(__name__)

CHECK_SECONDS = 0.1
"""How often (real seconds) the watch reads what is still unfinished."""

PAGE = 200

EMPTY_READS = 2
"""Reads in a row that must find nothing unfinished. One read is several pages, each its
own snapshot: a job that ends while a later page is read can enqueue another (a
continuation, a workflow step) onto a page already read, and that read finds neither."""

_RUNNING = frozenset({JobState.ENQUEUED, JobState.PROCESSING})
_WAITING = frozenset({JobState.SCHEDULED, JobState.FAILED})


def unfinished_due(
    storage: MonitoringStorage, queues: Collection[str], deadline: datetime
) -> list[JobSummary]:
    """The jobs of ``queues`` due by ``deadline`` that have not finished: ready or
    running, or scheduled or awaiting a retry due at or before ``deadline``."""
    found: list[JobSummary] = []
    cursor: str | None = None
    while True:
        page = storage.query_jobs(JobQuery(states=_RUNNING | _WAITING, cursor=cursor, limit=PAGE))
        found.extend(
            job
            for job in page.items
            if job.queue in queues
            and (
                job.state in _RUNNING
                or (job.state in _WAITING and (job.due_at is None or job.due_at <= deadline))
            )
        )
        cursor = page.next_cursor
        if cursor is None or not page.items:
            return found


@dataclass(frozen=True, slots=True)
class Unfinished:
    """What was still unfinished when the deadline passed."""

    deadline: datetime
    jobs: tuple[JobSummary, ...]

    def describe(self, shown: int = 5) -> str:
        """One line per job (the first ``shown``), for the command's error."""
        lines = [
            f"{job.id} ({job.target}) {job.state.value}"
            + (f", due {job.due_at.isoformat()}" if job.state in _WAITING and job.due_at else "")
            for job in self.jobs[:shown]
        ]
        if len(self.jobs) > shown:
            lines.append(f"... and {len(self.jobs) - shown} more")
        return "\n".join(lines)


class UntilDone:
    """Watches, on a thread of its own, for every job of ``queues`` due by ``deadline``
    to finish, then calls ``stop`` (the worker's and the scheduler's stop requests);
    calls it too once ``clock`` passes the deadline, keeping what was unfinished in
    :attr:`unfinished`."""

    def __init__(
        self,
        storage: MonitoringStorage,
        clock: Clock,
        *,
        queues: Collection[str],
        deadline: datetime,
        stop: Callable[[], None],
        hooks: Hooks | None = None,
    ) -> None:
        self._storage = storage
        self._clock = clock
        self._queues = frozenset(queues)
        self.deadline = deadline
        self._stop = stop
        self._hooks = hooks or Hooks()
        self._closed = threading.Event()
        self.unfinished: Unfinished | None = None
        self._thread = daemon_thread(self._watch, "millrace-until-done", self._hooks.around_thread)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        """Stop watching (the worker stopped for another reason)."""
        self._closed.set()
        if self._thread.is_alive():
            self._thread.join(JOIN_TIMEOUT)

    def _watch(self) -> None:
        empty_reads = 0
        while not self._closed.wait(CHECK_SECONDS):
            try:
                with self._hooks.around_turn():
                    now = self._clock.now()
                    left = unfinished_due(self._storage, self._queues, self.deadline)
            except Exception:
                logger.exception("--until-done could not read the unfinished jobs; trying again")
                continue
            empty_reads = 0 if left else empty_reads + 1
            if empty_reads == EMPTY_READS:
                logger.info("every job due by %s has finished; stopping", self.deadline)
            elif left and now >= self.deadline:
                self.unfinished = Unfinished(self.deadline, tuple(left))
                logger.warning(
                    "%d job(s) due by %s have not finished; stopping", len(left), self.deadline
                )
            else:
                continue
            self._stop()
            return
