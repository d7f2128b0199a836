"""The threads handlers run on: a pool for every job, one event loop for async jobs.

The pool takes claimed executions in batches and its threads pull them one by one from
a local queue, so a thread that finishes a job starts the next queued one without a
handoff, and a batch wakes threads one after another only while there is work for
them. The pool also decides how many jobs are worth claiming: one per free thread, plus
a *prefetch* of jobs that wait locally for a thread, sized by how fast recent handlers
returned (none while handlers are slow, so a slow queue never parks jobs here that
another worker could start).

Python cannot kill a thread. When the worker abandons a job that ignores its
cancellation, the pool starts a replacement thread so the worker keeps its full
concurrency; the stuck thread exits once its handler finally returns. Threads are
daemons, so a handler that never returns cannot keep the process alive at exit.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable

from millrace_django.runtime.inflight import Execution

logger = logging.getLogger(__name__)

JOIN_TIMEOUT = 5.0
"""Seconds to wait for a service thread to finish when closing."""

PREFETCH_HORIZON = 0.1
"""Seconds a prefetched job may expect to wait for a thread: the pool prefetches about
as many jobs as its threads finish in this time at the recent pace (at most the claim
batch). A thread busy with one job for longer than this counts as unavailable."""

WAKE_BUDGET = 0.002
"""Seconds of queued work (at the recent pace) per thread woken: a batch of quick jobs
wakes a few threads, each running several in a row, instead of one thread per job;
a batch of slow ones wakes a thread for each."""

STALL = 0.005
"""Seconds without a queued job being started, while threads are idle, after which the
pool wakes one more (the threads it woke all went into unexpectedly long jobs)."""

PACE_WEIGHT = 0.2
"""Weight of the latest handler duration in the running average."""

PACE_STEP = 1.25
"""Factor by which the running median of handler durations moves per job."""

type Run = Callable[[Execution], bool]
"""Runs one execution on a pool thread; ``False`` when the execution was abandoned
while it ran (a replacement thread took over, so this one retires)."""


class JobPool:
    """``size`` daemon threads running executions from a local queue, in order."""

    def __init__(self, size: int, name: str, run: Run) -> None:
        self.size = size
        self._name = name
        self._run = run
        self._queue: deque[Execution] = deque()
        self._lock = threading.Lock()
        self._work = threading.Condition(self._lock)
        """Idle threads wait here for executions."""
        self._room = threading.Condition(self._lock)
        """The claim loop waits here for room to claim."""
        self._watch = threading.Condition(self._lock)
        """The stall watch waits here while the queue is empty."""
        self._room_needed: int | None = None
        """While the claim loop waits: the ``free - queued`` that wakes it."""
        self._idle = 0
        """Threads waiting for work..."""
        self._waking = 0
        """...of which this many were woken and have not taken a job yet."""
        self._busy = 0
        """Threads running an execution that was not abandoned."""
        self._since: dict[int, float] = {}
        """When each busy thread started its current execution (``perf_counter``)."""
        self._pace: float | None = None
        """Running average of handler durations, in seconds (sizes the prefetch)."""
        self._typical: float | None = None
        """Running median of handler durations, in seconds (sizes the wake-ups): a
        median, because a quick job that waited for the interpreter lock in the middle
        is an outlier that an average would let wake ever more threads."""
        self._taken = 0
        """Executions taken from the queue so far (the stall watch's progress mark)."""
        self._holding = False
        self._closing = False
        self._started = 0

    def start(self) -> None:
        for _ in range(self.size):
            self._add_thread()
        threading.Thread(target=self._watch_stalls, name=f"{self._name}-watch", daemon=True).start()

    # -- the claim loop's side ------------------------------------------------------------

    def submit(self, executions: Iterable[Execution]) -> None:
        """Queue claimed executions and wake as many idle threads as they need."""
        with self._lock:
            was_empty = not self._queue
            self._queue.extend(executions)
            self._wake_threads()
            if was_empty:
                self._watch.notify()

    def demand(self, batch: int) -> tuple[int, int, int]:
        """``(want, queued, window)``: how many jobs to claim now (at most ``batch``),
        how many wait for a thread, and how many this pool could hold unstarted or
        running at the current pace (free threads plus the prefetch allowance)."""
        with self._lock:
            return self._demand(batch)

    def wait_for_room(self, batch: int, needed: int, timeout: float) -> None:
        """Block until the claim loop may claim ``needed`` jobs (a thread freed, queued
        ones started), :meth:`wake` is called, or ``timeout`` seconds pass."""
        with self._lock:
            if self._demand(batch)[0] >= needed:
                return
            prefetch = self._load(batch)[2]
            self._room_needed = needed - prefetch
            try:
                self._room.wait(timeout)
            finally:
                self._room_needed = None

    def wake(self) -> None:
        """End a :meth:`wait_for_room` now (a stop was requested)."""
        with self._lock:
            self._room.notify_all()

    def hold(self) -> list[Execution]:
        """Start nothing more; return the executions still queued (never started)."""
        with self._lock:
            self._holding = True
            held = list(self._queue)
            self._queue.clear()
            return held

    def replace_stuck(self) -> None:
        """An execution was abandoned while it ran: its thread no longer counts, and a
        replacement joins the pool."""
        with self._lock:
            self._busy -= 1
            self._room.notify()
        self._add_thread()

    def close(self) -> None:
        """Let idle threads exit; busy ones exit after their current execution."""
        with self._lock:
            self._closing = True
            self._work.notify_all()
            self._watch.notify()

    # -- internals ------------------------------------------------------------------------

    def _load(self, batch: int) -> tuple[int, int, int]:
        """``(free threads, queued executions, prefetch allowance)``; lock held."""
        free = self.size - self._busy
        queued = len(self._queue)
        pace = self._pace
        if pace is None:
            return free, queued, 0  # nothing measured yet: no prefetch
        now = time.perf_counter()
        available = self.size - sum(
            1 for since in self._since.values() if now - since > PREFETCH_HORIZON
        )
        prefetch = min(batch, int(available * PREFETCH_HORIZON / max(pace, 1e-6)))
        return free, queued, max(prefetch, 0)

    def _demand(self, batch: int) -> tuple[int, int, int]:
        free, queued, prefetch = self._load(batch)
        window = max(free, 0) + prefetch
        return max(0, min(batch, window - queued)), queued, window

    def _wake_threads(self) -> None:
        """Wake idle threads for the queued work, counting those already on their way
        to it (busy ones take the next job when they finish); lock held."""
        queued = len(self._queue)
        sleeping = self._idle - self._waking
        if not queued or self._holding or sleeping <= 0:
            return
        typical = self._typical
        wanted = queued if typical is None else -int(-queued * typical // WAKE_BUDGET)
        more = min(sleeping, wanted - self._busy - self._waking)
        if more > 0:
            self._waking += more
            self._work.notify(more)

    def _add_thread(self) -> None:
        with self._lock:
            self._started += 1
            number = self._started
        threading.Thread(target=self._serve, name=f"{self._name}-{number}", daemon=True).start()

    def _serve(self) -> None:
        lock, queue, run = self._lock, self._queue, self._run
        ident = threading.get_ident()
        spent: float | None = None  # how long the previous execution took
        keep = True
        while True:
            with lock:
                if spent is not None:
                    self._finished(ident, spent, keep)
                    if not keep:
                        return
                while not queue or self._holding:
                    if self._closing:
                        return
                    self._idle += 1
                    self._work.wait()
                    self._idle -= 1
                    if self._waking:
                        self._waking -= 1
                execution = queue.popleft()
                self._taken += 1
                self._busy += 1
                started = self._since[ident] = time.perf_counter()
                if queue:
                    self._wake_threads()
            try:
                keep = run(execution)
            except Exception:  # run handles its own errors; never lose the thread
                logger.exception("a job thread's task raised")
                keep = True
            spent = time.perf_counter() - started

    def _finished(self, ident: int, spent: float, keep: bool) -> None:
        """Book a returned execution: the thread is free again (unless it was replaced),
        the pace moves, and the claim loop learns of the room; lock held."""
        del self._since[ident]
        if keep:
            self._busy -= 1
        pace, typical = self._pace, self._typical
        if pace is None or typical is None:
            self._pace = self._typical = spent
        else:
            self._pace = pace + PACE_WEIGHT * (spent - pace)
            if spent > typical:
                self._typical = typical * PACE_STEP
            elif spent < typical:
                self._typical = typical / PACE_STEP
        needed = self._room_needed
        if needed is not None and self.size - self._busy - len(self._queue) >= needed:
            self._room.notify()

    def _watch_stalls(self) -> None:
        """While jobs are queued, wake one more thread whenever none was started for
        :data:`STALL` seconds although threads are idle."""
        with self._lock:
            while not self._closing:
                if not self._queue or self._holding:
                    self._watch.wait()
                    continue
                taken = self._taken
                self._watch.wait(STALL)
                sleeping = self._idle - self._waking
                if self._queue and not self._holding and self._taken == taken and sleeping > 0:
                    self._waking += 1
                    self._work.notify()


class LoopThread:
    """One asyncio event loop on a daemon thread, shared by every async job."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        """Stop the loop; async jobs still on it are cancelled."""
        if self._thread.is_alive():
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(2 * JOIN_TIMEOUT)
        elif not self.loop.is_closed():
            self.loop.close()

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_forever()
            leftovers = asyncio.all_tasks(self.loop)
            for task in leftovers:
                task.cancel()
            if leftovers:
                self.loop.run_until_complete(asyncio.wait(leftovers, timeout=JOIN_TIMEOUT))
            self.loop.run_until_complete(self.loop.shutdown_asyncgens())
        finally:
            self.loop.close()
