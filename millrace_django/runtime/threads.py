"""The threads handlers run on: a pool for every job, one event loop for async jobs.

Python cannot kill a thread. When the worker abandons a job that ignores its
cancellation, the pool starts a replacement thread so the worker keeps its full
concurrency; the stuck thread exits once its handler finally returns. Threads are
daemons, so a handler that never returns cannot keep the process alive at exit.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import Callable

logger = logging.getLogger(__name__)

JOIN_TIMEOUT = 5.0
"""Seconds to wait for a service thread to finish when closing."""

type Task = Callable[[], bool]
"""A unit of work; it returns ``False`` when its thread was replaced meanwhile and
should exit."""


class HandlerThreads:
    """A fixed-size pool of daemon threads that can replace a stuck member."""

    def __init__(self, size: int, name: str) -> None:
        self._size = size
        self._name = name
        self._tasks: queue.SimpleQueue[Task | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._started = 0

    def start(self) -> None:
        for _ in range(self._size):
            self.add_thread()

    def submit(self, task: Task) -> None:
        self._tasks.put(task)

    def add_thread(self) -> None:
        """Start one more thread (a member is stuck in an abandoned handler)."""
        with self._lock:
            self._started += 1
            number = self._started
        threading.Thread(target=self._serve, name=f"{self._name}-{number}", daemon=True).start()

    def close(self) -> None:
        """Let idle threads exit; busy ones exit after their current task."""
        for _ in range(self._size):
            self._tasks.put(None)

    def _serve(self) -> None:
        while (task := self._tasks.get()) is not None:
            try:
                keep = task()
            except Exception:  # a task handles its own errors; never lose the thread
                logger.exception("a handler thread's task raised")
                keep = True
            if not keep:
                return


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
