"""The worker: claim jobs, run them, keep their leases, write how each attempt ended.

Threads (daemons, so a stuck job never keeps the process alive at exit):

- the caller's thread runs the claim loop, :meth:`Worker.run`;
- ``millrace-job-N``: the pool of ``concurrency`` threads running job functions
  (:class:`~millrace_django.runtime.job_pool.JobPool`);
- ``millrace-asyncio``: one event loop that async job functions run on, up to
  ``async_concurrency`` at once, holding no thread while they wait
  (:class:`~millrace_django.runtime.job_pool.CoroutinePool`);
- ``millrace-maintenance``: heartbeats, timeouts and abandonment, looked at every tick;
- ``millrace-acks``: writes finished attempts in batches;
- ``millrace-wakeup``: turns the provider's notifications into wake-ups, if it has them.

The three stages overlap: a job's thread is free again as soon as its handler returns
(its lease is still renewed until its transition is written), so claiming never waits
for an acknowledgement, and the acknowledger writes one batch while the next is claimed
and run. When recent handlers were quick, the loop claims a full batch ahead of free
threads (a bounded prefetch, given back at shutdown if never started: attempt and all,
so it counts as no interruption). A job one interruption away from a poison-pill verdict
runs alone (:mod:`~millrace_django.runtime.quarantine`).

The worker holds no state that matters across a crash: every guarantee comes from the
storage (the claim, the lease, the fence on each write).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from types import MappingProxyType
from uuid import UUID

from millrace_django.clock import Clock
from millrace_django.contract import (
    ClaimRequest,
    JobRecord,
    JobState,
    JobStorage,
    WorkflowInstanceRecord,
)
from millrace_django.engine import CancelReason, JobContext, UnknownQueue, lookup, outcomes
from millrace_django.engine.workflow.prefetch import instances_of
from millrace_django.ids import new_id
from millrace_django.observability.logs import job_fields, log_attempt_end
from millrace_django.observability.telemetry import watch_queue_depth
from millrace_django.runtime.acks import Acknowledgement, Acknowledger
from millrace_django.runtime.clock_sync import ClockSync
from millrace_django.runtime.execution import (
    Outcome,
    cancellation_outcome,
    run_claimed,
    run_claimed_async,
)
from millrace_django.runtime.heartbeat import Heartbeat
from millrace_django.runtime.hooks import Hooks, daemon_thread
from millrace_django.runtime.inflight import Execution, InFlight
from millrace_django.runtime.job_pool import (
    JOIN_TIMEOUT,
    PREFETCH_BATCHES,
    CoroutinePool,
    JobPool,
    LoopThread,
)
from millrace_django.runtime.polling import Backoff, Wakeup
from millrace_django.runtime.quarantine import Quarantine
from millrace_django.runtime.runtime_settings import WorkerConfig, check_worker_config
from millrace_django.runtime.shutdown import StopRequests
from millrace_django.runtime.worker_registry import WorkerRegistration

logger = logging.getLogger(__name__)

DEFAULT_TICK = timedelta(milliseconds=250)
"""How often the maintenance thread looks at the clock for due heartbeats and deadlines."""


def default_worker_id(clock: Clock) -> str:
    """``"{hostname}:{pid}:{uuid7 hex}"``: readable in the dashboard, new per start."""
    return f"{socket.gethostname()}:{os.getpid()}:{new_id(clock).hex}"


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerStats:
    """A snapshot of what a worker did so far."""

    worker_id: str
    stopping: bool
    in_flight: int
    """Jobs held: claimed and not yet written (waiting for a thread, running, or
    waiting for their acknowledgement)."""
    claimed: int
    """Jobs claimed (each claim of a job counts)."""
    empty_claims: int
    """Claims that came back empty (the worker then waited)."""
    acknowledged: Mapping[JobState, int]
    """Transitions written, by target state."""
    fence_lost: int
    """Transitions the fence rejected: the claim had moved on (lease lost)."""
    refused: int
    """Transitions the storage refused or that were dropped after retries."""
    abandoned: int
    """Executions given up on while their function still ran."""
    heartbeats: int


class Worker:
    """Claims from ``queues`` and runs up to ``concurrency`` plain jobs (threads) and up
    to ``config.async_concurrency`` async ones (coroutines on one event loop) at once.

    ``run()`` blocks until the worker has stopped; ``request_stop()`` (thread-safe,
    also what SIGTERM should call) asks it to: the first request stops claiming, lets
    in-flight jobs finish for up to ``shutdown_timeout``, then fires their cancellation
    and, after ``shutdown_grace``, releases what still runs; a second request releases
    at once. A released job is claimable again and spends no retry budget; one that
    never started is given back with its attempt, so it counts as no interruption either.

    With ``clock_sync`` (built on ``clock``), the clock is calibrated to the database's
    before the first claim and again every minute, so a skewed machine neither reclaims
    live leases early nor writes leases that others read as expired.
    """

    def __init__(
        self,
        storage: JobStorage,
        clock: Clock,
        config: WorkerConfig,
        *,
        queues: Collection[str] | None = None,
        concurrency: int | None = None,
        worker_id: str | None = None,
        hooks: Hooks | None = None,
        tick: timedelta = DEFAULT_TICK,
        clock_sync: ClockSync | None = None,
    ) -> None:
        check_worker_config(config)
        self.queues = frozenset(config.queues if queues is None else queues)
        known = frozenset(config.queues)
        if not self.queues:
            raise ValueError("a worker needs at least one queue")
        for queue in sorted(self.queues - known):
            raise UnknownQueue(queue, known)
        self.concurrency = config.concurrency if concurrency is None else concurrency
        if self.concurrency < 1:
            raise ValueError(f"concurrency must be at least 1; got {self.concurrency}")
        if tick <= timedelta(0):
            raise ValueError(f"tick must be positive; got {tick}")
        self.worker_id = worker_id or default_worker_id(clock)
        self._storage = storage
        self._clock = clock
        self._config = config
        self._hooks = hooks or Hooks()
        self._tick = tick.total_seconds()
        self._clock_sync = clock_sync
        self._stops = StopRequests()
        self._in_flight = InFlight()
        self._quarantine = Quarantine(self._in_flight, config.interruption_limit)
        self._tally: Counter[str | JobState] = Counter()
        self._tally_lock = threading.Lock()
        self._started = False
        self._start_lock = threading.Lock()
        self._pool = JobPool(
            self.concurrency,
            "millrace-job",
            self._execute,
            around_thread=self._hooks.around_thread,
        )
        self._loop = LoopThread("millrace-asyncio")
        self._coroutines = CoroutinePool(
            config.async_concurrency, self._loop.loop, self._execute_async, self._pool.wake
        )
        self._wakeup = Wakeup(storage, self.queues, "millrace-wakeup")
        self._heartbeat = Heartbeat(
            storage, clock, self._in_flight, worker_id=self.worker_id, lease=config.lease
        )
        self._registration = WorkerRegistration(
            storage,
            clock,
            worker_id=self.worker_id,
            queues=self.queues,
            concurrency=self.concurrency,
        )
        self._acks = Acknowledger(
            storage,
            clock,
            on_acknowledged=self._acknowledged,
            around_turn=self._hooks.around_turn,
            name="millrace-acks",
            batch=config.claim_batch,
            around_thread=self._hooks.around_thread,
        )
        self._maintenance_done = threading.Event()
        self._maintenance = daemon_thread(
            self._maintain, "millrace-maintenance", self._hooks.around_thread
        )
        self._unwatch_depth: Callable[[], None] | None = None

    # -- public API -----------------------------------------------------------------------

    def run(self, *, until_idle: bool = False) -> None:
        """Claim and run jobs until stopped, then shut down in two phases.

        With ``until_idle``, stop by itself once a claim comes back empty while nothing
        is in flight (``millrace_worker --until-idle``). A worker runs once.
        """
        with self._start_lock:
            if self._started:
                raise RuntimeError("this Worker already ran; create a new one")
            self._started = True
        self._start()
        try:
            self._claim_loop(until_idle)
        finally:
            self._shut_down()

    def request_stop(self) -> None:
        """Ask the worker to stop (thread-safe); a second request skips the drain."""
        count = self._stops.request()
        logger.info(
            "worker %s: %s stop requested",
            self.worker_id,
            "graceful" if count == 1 else "immediate",
        )
        self._pool.stop_starting()
        self._coroutines.stop_starting()
        self._wakeup.set()
        self._pool.wake()
        self._in_flight.notify()

    def heartbeat(self) -> None:
        """Renew leases and look for cancel requests now (the maintenance thread does
        this every ``heartbeat`` by the clock)."""
        with self._hooks.around_turn():
            self._heartbeat.beat()
            self._registration.beat(self._in_flight.count())
        self._count("heartbeats")

    @property
    def stats(self) -> WorkerStats:
        with self._tally_lock:
            tally = Counter(self._tally)
        return WorkerStats(
            worker_id=self.worker_id,
            stopping=self._stops.requested,
            in_flight=self._in_flight.count(),
            claimed=tally["claimed"],
            empty_claims=tally["empty_claims"],
            acknowledged=MappingProxyType(
                {state: tally[state] for state in JobState if tally[state]}
            ),
            fence_lost=tally["fence_lost"],
            refused=tally["refused"],
            abandoned=tally["abandoned"],
            heartbeats=tally["heartbeats"],
        )

    # -- lifecycle ------------------------------------------------------------------------

    def _start(self) -> None:
        self._sync_clock()  # before the first claim compares a lease with the clock
        with self._hooks.around_turn():
            self._registration.beat(0)  # visible in the registry before its first heartbeat
        self._pool.start()
        self._loop.start()
        self._acks.start()
        self._wakeup.start()
        self._maintenance.start()
        self._unwatch_depth = watch_queue_depth(self._storage, self._hooks.around_turn)
        logger.info(
            "worker %s started: queues %s, concurrency %d, notifications %s",
            self.worker_id,
            ", ".join(sorted(self.queues)),
            self.concurrency,
            "on" if self._wakeup.listening else "off",
        )

    def _shut_down(self) -> None:
        """Give back what never started; phase one drains, phase two cancels and
        releases; then the threads stop."""
        if not self._stops.requested:
            self._stops.request()  # the claim loop ended by an error
        self._give_back_unstarted()
        self._await_idle(self._config.shutdown_timeout)
        running = self._in_flight.running()
        if running:
            now = self._clock.now()
            for execution in running:
                execution.cancel(CancelReason.SHUTDOWN, now)
            self._await_idle(self._config.shutdown_grace)
            for execution in self._in_flight.running():
                self._abandon(execution)
        self._acks.close()
        self._maintenance_done.set()
        self._maintenance.join(JOIN_TIMEOUT)
        self._wakeup.close()
        self._pool.close()
        self._loop.close()
        if self._unwatch_depth is not None:
            self._unwatch_depth()
        logger.info("worker %s stopped", self.worker_id)

    def _give_back_unstarted(self) -> None:
        """Give back the prefetched jobs no thread started, and a last-chance job still
        waiting for its turn."""
        self._give_back(
            [*self._pool.hold(), *self._coroutines.hold(), *self._quarantine.take_waiting()]
        )

    def _give_back(self, executions: Iterable[Execution]) -> None:
        """Give back, fenced, executions that have not started, with their attempt: no
        retry budget spent, no interruption counted, and another worker may run them at
        once."""
        for execution in executions:
            if execution.settle_unstarted():
                self._acks.submit(execution, outcomes.given_back(execution.job))

    def _await_idle(self, limit: timedelta) -> None:
        """Wait up to ``limit`` for every held job to be written, unless told to hurry."""
        if not self._stops.urgent:
            self._in_flight.wait_until(
                lambda: self._in_flight.count() == 0 or self._stops.urgent,
                limit.total_seconds(),
            )

    # -- claiming -------------------------------------------------------------------------

    def _claim_loop(self, until_idle: bool) -> None:
        backoff = Backoff(self._config.poll_min, self._config.poll_max)
        ceiling = self._config.poll_max.total_seconds()
        batch = self._config.claim_batch
        pool, in_flight, stops = self._pool, self._in_flight, self._stops
        # Held jobs, running or waiting for their acknowledgement, beyond which claiming
        # pauses: acknowledgements that fall behind must not grow the claim without bound.
        held_limit = self.concurrency + self._coroutines.size + (PREFETCH_BATCHES + 2) * batch
        coroutines = self._coroutines

        def overall(threads_want: int) -> int:
            return coroutines.demand(threads_want, batch)[0]

        while not stops.requested:
            if self._quarantine.active:
                # A last-chance job waits or runs alone: claim nothing meanwhile.
                turn = self._quarantine.step(ceiling, stops)
                if turn is not None:
                    self._submit([turn])  # held by its pool, given back, if a stop came
                continue
            if in_flight.count() >= held_limit:
                in_flight.wait_until(
                    lambda: in_flight.count() < held_limit or stops.requested, ceiling
                )
                continue
            want, queued, window = pool.demand(batch)
            want, waiting = coroutines.demand(want, batch)
            want = min(batch, want)
            # Nothing waits for a slot: claim whatever fits. Jobs still waiting: wait
            # until a claim can fetch a worthwhile share, so claims stay batches.
            needed = 1
            if queued:
                needed = max(1, min(batch, window) // 2)
            elif waiting:
                needed = max(1, batch // 2)
            if want < needed:
                pool.wait_for_room(batch, needed, ceiling, overall)
                continue
            self._wakeup.clear()  # a hint arriving during the claim must not be lost
            claimed = self._claim(want)
            if claimed:
                backoff.reset()
                self._dispatch(claimed)
                if len(claimed) < want and not until_idle and not self._quarantine.active:
                    # Fewer than asked: nothing else is claimable now. Wait for a hint
                    # (one that came during the claim is still pending) instead of
                    # paying for an empty claim.
                    self._wakeup.wait(backoff.next())
                continue
            if claimed is not None:
                self._count("empty_claims")
                if until_idle:
                    if in_flight.count() == 0:
                        self.request_stop()
                        break
                    in_flight.wait_until(lambda: in_flight.count() == 0 or stops.requested, ceiling)
                    continue
            self._wakeup.wait(backoff.next())

    def _claim(self, count: int) -> list[Execution] | None:
        """Claim up to ``count`` jobs, with the workflow instances their steps work on;
        ``None`` if the claim failed (logged)."""
        request = ClaimRequest(
            worker_id=self.worker_id,
            queues=self.queues,
            max_count=count,
            lease=self._config.lease,
        )
        try:
            with self._hooks.around_turn():
                claimed = self._storage.claim(request)
                instances = self._instances_of(claimed)
        except Exception:
            logger.exception(
                "worker %s: claim failed; retrying after the poll delay", self.worker_id
            )
            return None
        storage, clock = self._storage, self._clock
        executions = []
        for job in claimed:
            context = JobContext.for_job(job, clock, storage=storage)
            if instances:
                context.instance = instances.get(job.id)
            executions.append(Execution(job, context))
        return executions

    def _instances_of(self, claimed: list[JobRecord]) -> dict[UUID, WorkflowInstanceRecord]:
        """The claimed workflow steps' instances, or none if reading them failed (each
        step then reads its own): the claim already holds the jobs."""
        try:
            return instances_of(self._storage, claimed)
        except Exception:
            logger.warning(
                "worker %s: reading the claimed steps' instances failed",
                self.worker_id,
                exc_info=True,
            )
            return {}

    def _dispatch(self, executions: list[Execution]) -> None:
        replaced = self._in_flight.add_all(executions)
        self._count("claimed", len(executions))
        if logger.isEnabledFor(logging.DEBUG):
            for job in (execution.job for execution in executions):
                logger.debug(
                    "job %s (%s) attempt %d claimed",
                    job.id,
                    job.invocation.target,
                    job.attempt,
                    extra=job_fields(job),
                )
        if replaced:
            now = self._clock.now()
            for execution in replaced:
                execution.cancel(CancelReason.SUPERSEDED, now)
                self._abandon(execution)
        async_jobs = self._submit(self._quarantine.screen(executions, self._give_back))
        self._coroutines.claimed(len(executions), async_jobs)

    def _submit(self, executions: list[Execution]) -> int:
        """Hand executions to the pool of their kind; returns how many are async."""
        plain: list[Execution] = []
        coroutines: list[Execution] = []
        kinds: dict[str, list[Execution]] = {}  # by target: a claim mostly has a few
        for execution in executions:
            if execution.job.hard_timeout is not None:
                plain.append(execution)  # a thread waits for its child process
                continue
            target = execution.job.invocation.target
            kind = kinds.get(target)
            if kind is None:
                # Only a job already imported is known to be async; the first of its
                # module runs on a thread (which waits for it on the loop).
                definition = lookup(target)
                is_async = definition is not None and definition.is_async
                kind = kinds[target] = coroutines if is_async else plain
            kind.append(execution)
        if coroutines:
            self._coroutines.submit(coroutines)
        if plain:
            self._pool.submit(plain)
        return len(coroutines)

    # -- running --------------------------------------------------------------------------

    def _execute(self, execution: Execution) -> bool:
        """Run one job on a pool thread; ``False`` if it was abandoned meanwhile (its
        replacement thread took over, so this one retires)."""
        if not self._begin(execution):
            return True  # settled before it started (superseded, or its cancel came first)
        outcome: Outcome | None = None
        try:
            with self._hooks.around_job():
                outcome = run_claimed(
                    execution.job,
                    execution.context,
                    clock=self._clock,
                    config=self._config,
                    loop=self._loop.loop,
                )
        except Exception:
            self._log_failed_around(execution)
        return self._finish(execution, outcome)

    async def _execute_async(self, execution: Execution) -> None:
        """Run one async job as a task on the event loop (no thread, no ``around_job``:
        the coroutine's own database work goes through ``sync_to_async`` threads)."""
        if not self._begin(execution):
            return
        outcome: Outcome | None = None
        try:
            outcome = await run_claimed_async(
                execution.job, execution.context, clock=self._clock, config=self._config
            )
        except Exception:
            self._log_failed_around(execution)
        finally:
            self._coroutines.handler_ended(execution)
        self._finish(execution, outcome)

    def _begin(self, execution: Execution) -> bool:
        if execution.job.expires_at is not None and execution.missed_deadline(
            self._clock.now(), self._config.lease
        ):
            logger.info(
                "job %s not started: its deadline passed while it waited for a thread",
                execution.job.id,
                extra=job_fields(execution.job),
            )
            self._give_back([execution])  # the claims refuse it now; the sweep ends it
            return False
        if not execution.begin(self._clock):
            return False
        if logger.isEnabledFor(logging.DEBUG):
            job = execution.job
            logger.debug(
                "job %s (%s) attempt %d started",
                job.id,
                job.invocation.target,
                job.attempt,
                extra=job_fields(job),
            )
        return True

    def _log_failed_around(self, execution: Execution) -> None:
        logger.exception(
            "job %s: the worker failed around it; its lease will lapse and it will run again",
            execution.job.id,
            extra=job_fields(execution.job),
        )

    def _finish(self, execution: Execution, outcome: Outcome | None) -> bool:
        """Write how the attempt ended; ``False`` if it was abandoned meanwhile (its
        outcome is discarded)."""
        job = execution.job
        if not execution.settle(self._clock.now()):
            logger.info(
                "job %s attempt %d returned after it was abandoned; its outcome is discarded",
                job.id,
                job.attempt,
                extra=job_fields(job),
            )
            return False
        if outcome is not None:
            log_attempt_end(logger, job, outcome.transition, outcome.error)
        if outcome is not None and outcome.written is not None:
            self._acks.written(execution, outcome.transition, outcome.written)
            return True
        self._acks.submit(
            execution,
            outcome.transition if outcome is not None else None,
            linger=self._pool.queued() > 0 or self._coroutines.busy(),
        )
        return True

    def _abandon(self, execution: Execution) -> None:
        """Decide for an execution without its function: one that never started is
        settled by its cancellation; one still running has its thread replaced, and
        whatever it returns later is discarded."""
        if execution.settle_unstarted():
            self._settle_cancelled(execution)
            return
        if not execution.settle(self._clock.now()):
            return
        if not self._coroutines.forget(execution):
            self._pool.replace_stuck()
        self._count("abandoned")
        logger.warning(
            "job %s attempt %d still runs after its cancellation (%s); abandoning it, "
            "its eventual result will be discarded",
            execution.job.id,
            execution.job.attempt,
            execution.context.cancel_reason,
            extra=job_fields(execution.job),
        )
        self._settle_cancelled(execution)

    def _settle_cancelled(self, execution: Execution) -> None:
        """Write what a settled execution's cancellation comes to; one a shutdown
        cancelled before it started is given back, attempt and all."""
        if not execution.started and execution.context.cancel_reason is CancelReason.SHUTDOWN:
            self._acks.submit(execution, outcomes.given_back(execution.job))
            return
        transition = cancellation_outcome(
            execution.job, execution.context, clock=self._clock, config=self._config
        )
        self._acks.submit(execution, transition)

    def _acknowledged(self, batch: list[Acknowledgement]) -> None:
        tally: Counter[str | JobState] = Counter()
        for _, transition, result in batch:
            if result is True and transition is not None:
                tally[transition.target] += 1
            elif result is False:
                tally["fence_lost"] += 1
            elif result is not None:
                tally["refused"] += 1
        with self._tally_lock:
            self._tally.update(tally)
        self._in_flight.remove_all(execution for execution, _, _ in batch)
        if any(execution.job.limits for execution, _, _ in batch):
            self._wakeup.set()  # a limit's slot is free now: claim without the poll's delay

    # -- maintenance ----------------------------------------------------------------------

    def _maintain(self) -> None:
        """Every tick: enforce deadlines; every ``heartbeat`` (by the clock): beat."""
        next_beat = self._clock.now() + self._config.heartbeat
        while not self._maintenance_done.wait(self._tick):
            try:
                self._sync_clock()
                now = self._clock.now()
                self._enforce_deadlines(now)
                # A clock stepped back (recalibrated, or set by hand) beats now rather
                # than wait out the step while leases lapse.
                if now >= next_beat or next_beat - now > self._config.heartbeat:
                    next_beat = now + self._config.heartbeat
                    self.heartbeat()
            except Exception:
                logger.exception("worker %s: maintenance turn failed", self.worker_id)

    def _sync_clock(self) -> None:
        """Measure the clock's offset to the database's again when due (every
        minute; see :class:`~millrace_django.runtime.ClockSync`)."""
        sync = self._clock_sync
        if sync is not None and sync.due():
            with self._hooks.around_turn():
                sync.sync_if_due()

    def _enforce_deadlines(self, now: datetime) -> None:
        """Fire the timeout of jobs past their deadline; abandon jobs that ignored
        their cancellation for longer than ``shutdown_grace``."""
        for execution in self._in_flight.running():
            if execution.deadline is not None and now >= execution.deadline:
                execution.cancel(CancelReason.TIMEOUT, now)
            if execution.overran(now, self._config.shutdown_grace):
                self._abandon(execution)
            elif execution.cancelled and execution.settle_unstarted():
                # Cancelled while it waited for a thread: decide without running it.
                self._settle_cancelled(execution)

    def _count(self, key: str | JobState, n: int = 1) -> None:
        with self._tally_lock:
            self._tally[key] += n
