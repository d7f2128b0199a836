"""Where handlers run: a pool of threads for plain functions, one event loop for async ones.

The pool takes claimed executions in batches into a local queue; its threads pull them
one by one, so a thread that finishes a job starts the next queued one without a
handoff. Threads are started on demand (up to the concurrency) and woken by the queued
*work*, not the queued count: a batch of quick jobs runs on a thread or two, each
running many in a row (more threads would only contend for the interpreter lock), while
a batch of slow ones gets a thread each. A watch wakes one more thread whenever the
queue made no progress for a few milliseconds although threads are idle (the ones on it
went into unexpectedly long jobs).

The pool also decides how many jobs are worth claiming: one per free thread, plus a
*prefetch* of jobs that wait locally for a thread, sized by how fast recent handlers
returned (none while handlers are slow, so a slow queue never parks jobs here that
another worker could start).

Async jobs never hold a thread: they run as tasks on the loop, up to their own limit
(:class:`CoroutinePool`), so a worker keeps hundreds of coroutines waiting on I/O at once
whatever its thread count.

Python cannot kill a thread. When the worker abandons a job that ignores its
cancellation, its thread stops counting against the concurrency, so a replacement can
start; the stuck thread exits once its handler finally returns. Threads are daemons,
so a handler that never returns cannot keep the process alive at exit.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Coroutine, Iterable
from contextlib import nullcontext
from typing import Any

from millrace_django.runtime.hooks import Scope
from millrace_django.runtime.inflight import Execution

logger = logging.getLogger(__name__)

JOIN_TIMEOUT = 5.0
"""Seconds to wait for a service thread to finish when closing."""

PREFETCH_HORIZON = 0.1
"""Seconds a prefetched job may expect to wait for a thread: the pool prefetches about
as many jobs as its threads finish in this time at the recent pace. A thread busy with
one job for longer than this counts as unavailable."""

PREFETCH_BATCHES = 2
"""The prefetch is at most this many claim batches: one batch waiting for threads while
the next one is claimed, so a quick queue keeps a claim in flight at all times."""

WAKE_BUDGET = 0.01
"""Seconds of queued work (at the typical pace) per thread put on it: a batch of quick
jobs wakes a thread or two, a batch of slow ones a thread for each job."""

SHORT_JOB = 0.001
"""Handlers typically quicker than this (seconds) get no more threads than their kind of
work can keep busy (see ``JobPool._overlap``): for them, handing over the interpreter lock
costs more than the parallelism gains. Longer ones get a thread per
:data:`WAKE_BUDGET` of queued work, whatever they do (they may release the lock in C)."""

FIRST_THREADS = 4
"""Threads put on the first work, before the pace is known; the watch adds more while
those are all stuck (slow jobs, or first jobs waiting for their module's import)."""

FIRST_DURATIONS = 3
"""Handler durations the pace starts from (their median). A thread's first job never
counts: it pays for the thread's own start and, in a new process, for importing its
module (the jobs that started beside it wait for that import too), and a pace taken
from those would put a thread on every job of a quick batch."""

STALL = 0.005
"""Seconds without a queued job being started, while threads are idle or may start,
after which the watch puts one more thread on the queue. One, even while the pace is
unknown: threads that all wait for one module's import are no reason for more."""

CPU_SAMPLING = 8
"""A thread measures the CPU time of one job in this many (from its second, the first
that counts), for the overlap median: the measurement is a system call, and quick jobs
come by the thousand."""

PACE_WEIGHT = 0.2
"""Weight of the latest handler duration in the running average."""

PACE_STEP = 1.05
"""Factor by which the running medians of handler durations move per job."""

type Run = Callable[[Execution], bool]
"""Runs one execution on a pool thread; ``False`` when the execution was abandoned
while it ran (its thread no longer counts, and retires when the handler returns)."""


class _Backlog:
    """Executions waiting, in claim order, for a slot to run in; a stop freezes them and
    takes them back (never started, so they can be released)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queue: deque[Execution] = deque()
        self._holding = False

    def stop_starting(self) -> None:
        """Start nothing more: a graceful stop lets running jobs finish, never a job
        claimed or queued after the stop was asked for."""
        with self._lock:
            self._holding = True

    def hold(self) -> list[Execution]:
        """Start nothing more; return the executions still queued (never started)."""
        with self._lock:
            self._holding = True
            held = list(self._queue)
            self._queue.clear()
            return held


class JobPool(_Backlog):
    """Up to ``size`` daemon threads running executions from a local queue, in order;
    each lives inside ``around_thread`` (see :class:`~millrace_django.runtime.Hooks`)."""

    def __init__(
        self, size: int, name: str, run: Run, *, around_thread: Scope = nullcontext
    ) -> None:
        super().__init__()
        self.size = size
        self._name = name
        self._run = run
        self._around_thread = around_thread
        self._work = threading.Condition(self._lock)
        """Idle threads wait here for executions."""
        self._room = threading.Condition(self._lock)
        """The claim loop waits here for room to claim."""
        self._watch = threading.Condition(self._lock)
        """The stall watch waits here while the queue is empty."""
        self._gone = threading.Condition(self._lock)
        """:meth:`close` waits here for the counted threads to leave."""
        self._room_needed: int | None = None
        """While the claim loop waits: the ``free - queued`` that wakes it."""
        self._threads = 0
        """Threads started and not retired (a stuck one retires when it is abandoned)."""
        self._idle = 0
        """Threads waiting for work..."""
        self._woken = 0
        """...of which this many were woken for queued work and have not taken it yet."""
        self._starting = 0
        """Threads started for queued work that have not taken it yet."""
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
        self._overlap = 1.0
        """Running median of each handler's duration over its CPU time: how many threads
        its kind of work can keep busy at once (1 for pure Python, many for jobs that
        wait on I/O). More threads than that only contend for the interpreter lock."""
        self._first_durations: list[float] = []
        """The handler durations so far, until the pace starts (:data:`FIRST_DURATIONS`)."""
        self._taken = 0
        """Executions taken from the queue so far (the watch's progress mark)."""
        self._closing = False
        self._numbered = 0

    def start(self) -> None:
        """Start the stall watch; job threads start when there is work for them."""
        threading.Thread(target=self._watch_stalls, name=f"{self._name}-watch", daemon=True).start()

    # -- the claim loop's side ------------------------------------------------------------

    def submit(self, executions: Iterable[Execution]) -> None:
        """Queue claimed executions and put as many threads on them as they need."""
        with self._lock:
            was_empty = not self._queue
            self._queue.extend(executions)
            self._add_workers(self._wanted() - self._active())
            if was_empty:
                self._watch.notify()

    def demand(self, batch: int) -> tuple[int, int, int]:
        """``(want, queued, window)``: how many jobs to claim now (at most ``batch``),
        how many wait for a thread, and how many this pool could hold unstarted or
        running at the current pace (free threads plus the prefetch allowance)."""
        with self._lock:
            return self._demand(batch)

    def queued(self) -> int:
        """Executions waiting for a thread (a snapshot, read without the lock)."""
        return len(self._queue)

    def wait_for_room(
        self, batch: int, needed: int, timeout: float, overall: Callable[[int], int]
    ) -> None:
        """Block until the claim loop may claim ``needed`` jobs (``overall`` turns what
        the threads want into what every pool wants: a thread freed, queued ones
        started, or room elsewhere), :meth:`wake` is called, or ``timeout`` seconds
        pass."""
        with self._lock:
            if overall(self._demand(batch)[0]) >= needed:
                return
            prefetch = self._load(batch)[2]
            self._room_needed = needed - prefetch
            try:
                self._room.wait(timeout)
            finally:
                self._room_needed = None

    def wake(self) -> None:
        """End a :meth:`wait_for_room` now (a stop was requested, or room appeared
        elsewhere)."""
        with self._lock:
            self._room.notify_all()

    def replace_stuck(self) -> None:
        """An execution was abandoned while it ran: its thread no longer counts (it
        retires when the handler returns), so another may start in its place."""
        with self._lock:
            self._busy -= 1
            self._threads -= 1
            self._room.notify()
            self._add_workers(self._wanted() - self._active())

    def close(self) -> None:
        """Let idle threads exit, busy ones after their current execution, and wait up
        to :data:`JOIN_TIMEOUT` for them to be gone (each closes its connections as it
        goes, see ``around_thread``). An abandoned thread, stuck in its handler, is not
        waited for."""
        with self._lock:
            self._closing = True
            self._work.notify_all()
            self._watch.notify()
            self._gone.wait_for(lambda: self._threads == 0, JOIN_TIMEOUT)

    # -- internals (lock held) ------------------------------------------------------------

    def _load(self, batch: int) -> tuple[int, int, int]:
        """``(free threads, queued executions, prefetch allowance)``."""
        free = self.size - self._busy
        queued = len(self._queue)
        pace = self._pace
        if pace is None:
            return free, queued, 0  # nothing measured yet: no prefetch
        now = time.perf_counter()
        available = self.size - sum(
            1 for since in self._since.values() if now - since > PREFETCH_HORIZON
        )
        prefetch = min(
            PREFETCH_BATCHES * batch, int(available * PREFETCH_HORIZON / max(pace, 1e-6))
        )
        return free, queued, max(prefetch, 0)

    def _demand(self, batch: int) -> tuple[int, int, int]:
        free, queued, prefetch = self._load(batch)
        window = max(free, 0) + prefetch
        return max(0, min(batch, window - queued)), queued, window

    def _wanted(self) -> int:
        """Threads worth having on the queued work: one per :data:`WAKE_BUDGET` of it at
        the typical pace (a few, until a pace is known)."""
        queued = len(self._queue)
        if not queued or self._holding:
            return 0
        typical = self._typical
        if typical is None:
            return min(queued, FIRST_THREADS)
        by_work = -int(-queued * typical // WAKE_BUDGET)
        if typical >= SHORT_JOB:
            return by_work
        return min(by_work, max(1, round(self._overlap)))

    def _active(self) -> int:
        """Threads that will take queued work soon: those woken or started for it, and
        busy ones whose current job started less than :data:`WAKE_BUDGET` ago (one
        stuck in a long job does not count)."""
        now = time.perf_counter()
        recent = sum(1 for since in self._since.values() if now - since <= WAKE_BUDGET)
        return self._woken + self._starting + recent

    def _add_workers(self, count: int) -> None:
        """Put up to ``count`` more threads on the queue: idle ones first, then new ones
        while fewer than ``size`` run jobs."""
        sleeping = self._idle - self._woken
        wake = min(count, sleeping)
        if wake > 0:
            self._woken += wake
            self._work.notify(wake)
        start = min(count - max(wake, 0), self.size - self._threads)
        for _ in range(start):
            self._numbered += 1
            thread = threading.Thread(
                target=self._live, name=f"{self._name}-{self._numbered}", daemon=True
            )
            self._threads += 1
            self._starting += 1
            try:
                thread.start()
            except RuntimeError:  # the system refuses more threads: make do with these
                self._threads -= 1
                self._starting -= 1
                logger.exception("cannot start job thread %s", thread.name)
                return

    def _live(self) -> None:
        """A job thread's whole life: serve inside the host's ``around_thread`` scope,
        then, unless it was abandoned (no longer counted), leave the count, so that
        :meth:`close` returns once its connections are closed."""
        with self._around_thread():
            counted = self._serve()
        if counted:
            with self._lock:
                self._threads -= 1
                self._gone.notify_all()

    def _serve(self) -> bool:
        """Run queued executions until closed (``True``: still counted) or abandoned
        (``False``: its replacement took its place in the count)."""
        lock, queue, run = self._lock, self._queue, self._run
        ident = threading.get_ident()
        spent: float | None = None  # how long the previous execution took...
        cpu: float | None = None  # ...and how much of that this thread ran, if measured
        runs = 0  # executions this thread started (its first does not count)
        keep = True
        with lock:
            self._starting -= 1
        while True:
            with lock:
                park = False
                wanted: int | None = None
                if spent is not None:
                    self._finished(ident, spent, cpu, keep, counts=runs > 1)
                    if not keep:
                        return False
                    # Enough other threads are on the queue: sleep rather than add
                    # one more to the contention for the interpreter lock.
                    wanted = self._wanted()
                    park = wanted < self._woken + self._starting + len(self._since)
                    park = park and wanted < self._active()
                while park or not queue or self._holding:
                    if self._closing:
                        return True
                    park, wanted = False, None
                    self._idle += 1
                    self._work.wait()
                    self._idle -= 1
                    if self._woken:
                        self._woken -= 1
                execution = queue.popleft()
                self._taken += 1
                self._busy += 1
                started = self._since[ident] = time.perf_counter()
                if queue:
                    if wanted is None:  # (else counted before this job was taken)
                        wanted = self._wanted()
                    if wanted > 1:  # this thread is one, and on its way
                        self._add_workers(wanted - self._active())
            measured = runs % CPU_SAMPLING == 1
            runs += 1
            ran = time.thread_time() if measured else 0.0
            try:
                keep = run(execution)
            except Exception:  # run handles its own errors; never lose the thread
                logger.exception("a job thread's task raised")
                keep = True
            cpu = time.thread_time() - ran if measured else None
            spent = time.perf_counter() - started

    def _finished(
        self, ident: int, spent: float, cpu: float | None, keep: bool, *, counts: bool
    ) -> None:
        """Book a returned execution: the thread is free again (unless it was
        abandoned), the pace moves (if the execution ``counts``), and the claim loop
        learns of the room."""
        del self._since[ident]
        if keep:
            self._busy -= 1
        if counts:
            self._learn(spent, cpu)
        needed = self._room_needed
        if needed is not None and self.size - self._busy - len(self._queue) >= needed:
            self._room.notify()

    def _learn(self, spent: float, cpu: float | None) -> None:
        """Move the pace (and the overlap, if ``cpu`` was measured) by one duration."""
        pace, typical = self._pace, self._typical
        if pace is None or typical is None:
            first = self._first_durations
            first.append(spent)
            if len(first) == FIRST_DURATIONS:
                self._pace = self._typical = sorted(first)[len(first) // 2]
        else:
            self._pace = pace + PACE_WEIGHT * (spent - pace)
            self._typical = _step(typical, spent)
        if cpu is not None:
            self._overlap = _step(self._overlap, spent / cpu if cpu > 0 else spent / 1e-6)

    def _watch_stalls(self) -> None:
        """While jobs are queued, put one more thread on them whenever none was started
        for :data:`STALL` seconds."""
        with self._lock:
            while not self._closing:
                if not self._queue or self._holding:
                    self._watch.wait()
                    continue
                taken = self._taken
                self._watch.wait(STALL)
                if self._queue and not self._holding and self._taken == taken:
                    self._add_workers(1)


def _step(median: float, sample: float) -> float:
    """One step of a running median: move ``median`` a little towards ``sample``."""
    if sample > median:
        return median * PACE_STEP
    if sample < median:
        return median / PACE_STEP
    return median


type RunAsync = Callable[[Execution], Coroutine[Any, Any, object]]
"""Runs one async execution on the event loop."""

SHARE_WEIGHT = 0.5
"""Weight of the latest claim in the running share of async jobs among those claimed."""


class CoroutinePool(_Backlog):
    """Up to ``size`` async executions at once, as tasks on one event loop; the rest
    wait here in order. A finished one makes room for the next at once, on the loop,
    and calls ``on_room`` (thread-safe) so the claim loop can claim again."""

    def __init__(
        self, size: int, loop: asyncio.AbstractEventLoop, run: RunAsync, on_room: Callable[[], None]
    ) -> None:
        super().__init__()
        self.size = size
        self._loop = loop
        self._run = run
        self._on_room = on_room
        self._tasks: dict[Execution, asyncio.Task[object] | None] = {}
        """Executions started and not abandoned (their task, once the loop made it)."""
        self._share = 0.0
        """Running share of async jobs among those claimed lately (see :meth:`demand`)."""
        self._unfinished: set[Execution] = set()
        """Executions given a slot whose handler has not returned (see :meth:`busy`)."""

    def claimed(self, jobs: int, async_jobs: int) -> None:
        """Note what one claim brought: ``async_jobs`` of ``jobs`` were async."""
        if jobs:
            with self._lock:
                self._share += SHARE_WEIGHT * (async_jobs / jobs - self._share)

    def demand(self, threads_want: int, batch: int) -> tuple[int, int]:
        """``(want, queued)``: jobs worth claiming now for both pools, given what the
        threads want, each pool weighted by the share of its kind among the jobs claimed
        lately (so a run of async jobs does not claim for idle threads, nor a queue of
        plain functions park jobs here for a slot they cannot use); this pool can hold
        its free slots plus one batch waiting. ``queued``: how many wait here."""
        with self._lock:
            queued = len(self._queue)
            free = max(0, self.size + batch - len(self._tasks) - queued)
            share = self._share
        return int(threads_want * (1 - share) + free * share), queued

    def busy(self) -> bool:
        """Another execution waits, or has a slot and its handler has not returned (a
        snapshot, read without the lock): another job is about to finish. (One whose
        handler returned no longer counts, though its slot is freed only when its task
        ends: the last of a batch must not wait for the others' slots.)"""
        return len(self._unfinished) + len(self._queue) > 0

    def handler_ended(self, execution: Execution) -> None:
        """``execution``'s handler returned, raised or was cancelled (see :meth:`busy`)."""
        with self._lock:
            self._unfinished.discard(execution)

    def submit(self, executions: Iterable[Execution]) -> None:
        """Queue async executions; start as many as there are free slots."""
        with self._lock:
            self._queue.extend(executions)
            starting = self._take()
        if starting:
            self._loop.call_soon_threadsafe(self._spawn, starting)

    def forget(self, execution: Execution) -> bool:
        """An execution was abandoned while it ran: free its slot and cancel its task
        (whatever it returns is discarded). ``False`` if it is not one of this pool's."""
        with self._lock:
            if execution not in self._tasks:
                return False
            task = self._tasks.pop(execution)
            self._unfinished.discard(execution)
            starting = self._take()
        if task is not None:
            self._loop.call_soon_threadsafe(task.cancel)
        if starting:
            self._loop.call_soon_threadsafe(self._spawn, starting)
        self._on_room()
        return True

    def _take(self) -> list[Execution]:
        """Move queued executions into free slots (lock held); the caller spawns them."""
        starting: list[Execution] = []
        while self._queue and len(self._tasks) < self.size and not self._holding:
            execution = self._queue.popleft()
            self._tasks[execution] = None
            self._unfinished.add(execution)
            starting.append(execution)
        return starting

    def _spawn(self, executions: list[Execution]) -> None:
        """Start a task for each execution (on the loop)."""
        for execution in executions:
            task = self._loop.create_task(self._run(execution))
            with self._lock:
                if execution in self._tasks:
                    self._tasks[execution] = task
                    task.add_done_callback(functools.partial(self._done, execution))
                    continue
            task.cancel()  # abandoned before its task existed

    def _done(self, execution: Execution, _task: asyncio.Task[object]) -> None:
        """A task ended (on the loop): its slot goes to the next queued execution."""
        with self._lock:
            self._tasks.pop(execution, None)
            self._unfinished.discard(execution)  # (one that never began)
            starting = self._take()
        self._spawn(starting)
        self._on_room()


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
