"""The in-memory provider: every contract, thread-safe, in-process notifications.

It is a real implementation held to the whole conformance kit, for development and
tests. It is **not durable**: everything is lost when the process exits.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from millrace_django.clock import Clock
from millrace_django.storage.memory.monitoring import MemoryMonitoring
from millrace_django.storage.memory.notifier import MemorySubscription
from millrace_django.storage.memory.store import MemoryJobStore


class MemoryStorage(MemoryJobStore, MemoryMonitoring):
    """Job, workflow and monitoring storage in one process's memory."""

    def __init__(self, clock: Clock) -> None:
        MemoryJobStore.__init__(self, clock)
        MemoryMonitoring.__init__(self, self)

    def listen(self, queues: frozenset[str] | set[str] | list[str]) -> MemorySubscription:
        return self.notifier.listen(queues)


class MemoryStoreUnderTest:
    """The kit's view of one :class:`MemoryStorage`."""

    def __init__(self, storage: MemoryStorage) -> None:
        self.jobs = self.workflows = self.monitoring = storage

    def end_thread(self) -> None:
        """Nothing is held per thread."""


class MemoryHarness:
    """Binds the conformance kit: a fresh storage per fact."""

    @contextmanager
    def open(self, clock: Clock) -> Iterator[MemoryStoreUnderTest]:
        yield MemoryStoreUnderTest(MemoryStorage(clock))


__all__ = ["MemoryHarness", "MemoryStorage"]
