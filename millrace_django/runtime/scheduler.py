"""The scheduler: make due jobs claimable, end jobs past their deadline, fire due cron
occurrences, purge old jobs, forget workers long silent.

Run it on every node at once: there is no leader. Each due job is activated exactly once
and each cron occurrence fires exactly once because the storage makes those moves
atomic (a lost compare-and-set is a normal ``False``). A pass that fails is logged and
the next one starts afresh. The module-level steps are shared with the test runner.

Between passes it sleeps until the next due job or cron occurrence, as read at the end
of its pass, but never longer than ``scheduler_interval``: nothing wakes a sleeping
scheduler, so work added meanwhile with an earlier due time is found at most one
interval late (as the interval bounds every lateness when nothing is planned). The
housekeeping (expiry, purge, folding counts, forgetting idle limits and silent workers)
runs at most once per interval: a pass woken for due work does the due work and leaves the
machine to the workers claiming it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from types import MappingProxyType

from millrace_django.clock import Clock
from millrace_django.contract import (
    MAX_RATE_PERIOD,
    FireOutcome,
    JobStorage,
    Limit,
    RecurringRecord,
)
from millrace_django.engine import InvalidCron
from millrace_django.engine.recurring import following_fire_time, occurrence
from millrace_django.runtime.clock_sync import ClockSync
from millrace_django.runtime.hooks import Hooks
from millrace_django.runtime.runtime_settings import SchedulerConfig, check_scheduler_config

logger = logging.getLogger(__name__)

MAX_BATCHES = 10
"""Storage calls per step and pass; a larger backlog drains over the following passes."""

SHORTEST_PAUSE = timedelta(milliseconds=20)
"""After a pass woken early that found due work, the next waits at least this long: work
due at scattered instants (a retry storm) costs at most one pass per this pause, not one
per instant. Any other pass is never held back, so a cron occurrence on an otherwise
quiet scheduler fires on time (also when the sleep ended a hair before it was due)."""

FOLD_BATCH = 5000
"""Groups of the maintained counts a call folds at most (see ``fold_statistics``)."""

FORGET_WORKERS_EVERY = timedelta(minutes=1)
"""How often (on the injected clock) a scheduler forgets silent workers: their rows go
within a minute of passing ``worker_retention``, at the cost of one small delete a minute
per scheduler rather than one a pass."""


@dataclass(frozen=True, slots=True, kw_only=True)
class SchedulerPass:
    """What one pass did."""

    activated: int = 0
    expired: int = 0
    fired: int = 0
    purged: int = 0
    forgotten: int = 0
    next_due: datetime | None = None
    """The earliest due job or cron occurrence after the pass's instant, as read at its
    end; ``None`` if none waits or the read failed."""


def pause(
    now: datetime, done: SchedulerPass, interval: timedelta, *, woken_early: bool
) -> timedelta:
    """How long to sleep at ``now`` (the injected clock's) after the pass ``done``:
    until its next due time, at most ``interval``, never negative; at least
    :data:`SHORTEST_PAUSE` when ``done`` was woken early (by a due time) and activated
    or fired something."""
    if done.next_due is None:
        return interval
    throttled = woken_early and (done.activated or done.fired)
    floor = SHORTEST_PAUSE if throttled else timedelta(0)
    return min(max(done.next_due - now, floor), interval)


def housekeeping_due(last: datetime | None, now: datetime, interval: timedelta) -> bool:
    """Whether a pass at ``now`` does the housekeeping, last done at ``last``: at most once
    per ``interval`` (a clock that moved back before ``last`` does not postpone it)."""
    return last is None or not last <= now < last + interval


def activate_due(storage: JobStorage, now: datetime, batch: int) -> int:
    """Move due scheduled jobs and due retries to ``enqueued``; returns how many."""

    def step() -> tuple[int, int]:
        count = storage.activate_due(now, batch)
        return count, count

    return _in_batches(step, batch)


def expire_due(storage: JobStorage, now: datetime, batch: int) -> int:
    """Cancel the unstarted jobs whose deadline has passed by ``now`` (claims already
    refuse them: this gives them their end, also on queues no worker claims from);
    returns how many."""

    def step() -> tuple[int, int]:
        count = storage.expire_due(now, batch)
        return count, count

    return _in_batches(step, batch)


def fire_due_recurring(
    storage: JobStorage,
    clock: Clock,
    now: datetime,
    batch: int,
    queue_limits: Mapping[str, Limit] = MappingProxyType({}),
) -> int:
    """Fire each recurring definition due at ``now`` once; returns how many this caller
    fired (a definition another node fired first, or whose overlap policy skipped or
    held the occurrence, is not counted). Fired jobs carry their queue's limit from
    ``queue_limits`` and their function's.

    Missed occurrences collapse into one fire, and the next fire time is computed from
    ``now``. A stored cron that no longer parses is logged and skipped.
    """

    def step() -> tuple[int, int]:
        due = storage.get_due_recurring(now, batch)
        fired = (_fire(storage, clock, record, now, queue_limits) for record in due)
        return len(due), sum(fired)

    return _in_batches(step, batch)


def forget_idle_limits(storage: JobStorage, now: datetime, batch: int) -> int:
    """Forget the limit scopes without a start for longer than any rate's period (a
    keyed limit would otherwise keep a row per key ever seen); returns how many."""

    def step() -> tuple[int, int]:
        count = storage.forget_idle_limits(now - MAX_RATE_PERIOD, batch)
        return count, count

    return _in_batches(step, batch)


def purge_finished(storage: JobStorage, before: datetime, batch: int) -> int:
    """Delete jobs that finished before ``before``; returns how many."""

    def step() -> tuple[int, int]:
        count = storage.purge_finished(before, batch)
        return count, count

    return _in_batches(step, batch)


def fold_statistics(storage: JobStorage, batch: int) -> int:
    """Compact the storage's maintained counts of finished jobs (if it keeps any), so
    that statistics read about one record per group; returns how many records went."""
    fold = getattr(storage, "fold_statistics", None)
    if fold is None:
        return 0

    def step() -> tuple[int, int]:
        count = int(fold(batch))
        return count, count

    return _in_batches(step, batch)


def _fire(
    storage: JobStorage,
    clock: Clock,
    record: RecurringRecord,
    now: datetime,
    queue_limits: Mapping[str, Limit],
) -> bool:
    try:
        following = following_fire_time(record, now)
    except InvalidCron as error:
        logger.error("recurring %r has an invalid stored cron; skipped: %s", record.id, error)
        return False
    outcome = storage.try_fire_recurring(
        record.id, record.next_fire_time, following, occurrence(record, clock, queue_limits)
    )
    if outcome is FireOutcome.SKIPPED:
        logger.info(
            "recurring %r skipped its occurrence of %s: the job of its previous fire (%s) "
            "is still active",
            record.id,
            record.next_fire_time,
            record.fired_job_id,
        )
    elif outcome is FireOutcome.LOST:
        logger.debug("recurring %r was fired elsewhere first", record.id)
    return outcome is FireOutcome.FIRED


def _in_batches(step: Callable[[], tuple[int, int]], batch: int) -> int:
    """Repeat ``step`` (returning how many rows it saw and how many it acted on) while
    it sees full batches, at most :data:`MAX_BATCHES` times; the total acted on."""
    total = 0
    for _ in range(MAX_BATCHES):
        seen, acted = step()
        total += acted
        if seen < batch:
            break
    return total


class Scheduler:
    """Periodic passes over the storage; safe to run on every node.

    With ``clock_sync`` (built on ``clock``), each pass first calibrates the clock to
    the database's when due, so a skewed machine fires nothing early.
    """

    def __init__(
        self,
        storage: JobStorage,
        clock: Clock,
        config: SchedulerConfig,
        *,
        hooks: Hooks | None = None,
        clock_sync: ClockSync | None = None,
    ) -> None:
        check_scheduler_config(config)
        self._storage = storage
        self._clock = clock
        self._config = config
        self._hooks = hooks or Hooks()
        self._clock_sync = clock_sync
        self._stop = threading.Event()
        self._forgot_at: datetime | None = None

    def run_once(self, *, housekeeping: bool = True) -> SchedulerPass:
        """One pass at the clock's current time: the due work (cron, then activation),
        then, if ``housekeeping``, expiry, the purge and the rest. Each step's failure is logged
        and does not prevent the others."""
        batch = self._config.activation_batch
        expired = purged = forgotten = 0
        with self._hooks.around_turn():
            if self._clock_sync is not None:
                self._clock_sync.sync_if_due()
            now = self._clock.now()
            # Cron first: a pass woken for an occurrence fires it before anything else.
            fired = self._step(
                "recurring",
                lambda: fire_due_recurring(
                    self._storage, self._clock, now, batch, self._config.queue_limits
                ),
            )
            activated = self._step("activation", lambda: activate_due(self._storage, now, batch))
            if housekeeping:
                # Expiry too: no claim starts a job past its deadline meanwhile.
                expired = self._step("expiry", lambda: expire_due(self._storage, now, batch))
                purged = self._step("purge", lambda: self.purge(now))
                self._step("statistics", lambda: fold_statistics(self._storage, FOLD_BATCH))
                self._step("limits", lambda: forget_idle_limits(self._storage, now, batch))
                forgotten = self._step("worker registry", lambda: self.forget_workers(now))
            next_due = self._next_due(now)
        return SchedulerPass(
            activated=activated,
            expired=expired,
            fired=fired,
            purged=purged,
            forgotten=forgotten,
            next_due=next_due,
        )

    def _next_due(self, now: datetime) -> datetime | None:
        """The storage's next due time after ``now``; ``None`` (sleep a whole interval)
        if the read fails."""
        try:
            return self._storage.next_due_time(now)
        except Exception:
            logger.exception("scheduler could not read the next due time; sleeping an interval")
            return None

    def purge(self, now: datetime) -> int:
        """Delete jobs finished longer than ``retention`` before ``now`` (none if
        retention is ``None``); bounded per call, so call again while it returns rows."""
        retention = self._config.retention
        if retention is None:
            return 0
        return purge_finished(self._storage, now - retention, self._config.purge_batch)

    def forget_workers(self, now: datetime) -> int:
        """Delete the registry rows of workers last seen more than ``worker_retention``
        before ``now`` (none if that is ``None`` or the storage keeps no registry), at most
        once per :data:`FORGET_WORKERS_EVERY`. Only rows go: a dead worker's jobs come
        back by their leases, never by its row; and the retention is longer than a lease,
        so a worker still heartbeating (and holding its leases) is never forgotten."""
        retention = self._config.worker_retention
        forget = getattr(self._storage, "forget_workers", None)
        if retention is None or forget is None or self._forgot_recently(now):
            return 0
        self._forgot_at = now
        cutoff = now - retention
        forgotten = int(forget(cutoff))
        if forgotten:
            logger.info("forgot %d worker(s) silent since before %s", forgotten, cutoff)
        return forgotten

    def _forgot_recently(self, now: datetime) -> bool:
        """Within :data:`FORGET_WORKERS_EVERY` after the last forget (a clock that moved
        back before it does not postpone the next one)."""
        last = self._forgot_at
        return last is not None and last <= now < last + FORGET_WORKERS_EVERY

    def run(self) -> None:
        """Passes until :meth:`request_stop`, each when the next job or cron occurrence
        is due (see :func:`pause`) and at least every ``scheduler_interval``, the
        housekeeping in the first pass of each interval; the sleep is measured on the
        injected clock and slept in real time."""
        interval = self._config.scheduler_interval
        logger.info("scheduler started: a pass when work is due, at least every %s", interval)
        woken_early = False
        housekept: datetime | None = None
        while not self._stop.is_set():
            started = self._clock.now()
            housekeeping = housekeeping_due(housekept, started, interval)
            housekept = started if housekeeping or housekept is None else housekept
            try:
                done = self.run_once(housekeeping=housekeeping)
            except Exception:  # the hooks failed; the steps guard themselves
                logger.exception("scheduler pass failed; the next pass retries")
                done = SchedulerPass()
            now = self._clock.now()
            # Never past the next housekeeping: it comes once per interval, not two.
            sleep = min(
                pause(now, done, interval, woken_early=woken_early),
                max(housekept + interval - now, timedelta(0)),
            )
            woken_early = sleep < interval
            self._stop.wait(sleep.total_seconds())
        logger.info("scheduler stopped")

    def request_stop(self) -> None:
        """Stop after the current pass (thread-safe)."""
        self._stop.set()

    @staticmethod
    def _step(name: str, step: Callable[[], int]) -> int:
        try:
            return step()
        except Exception:
            logger.exception("scheduler %s step failed; the next pass retries", name)
            return 0
