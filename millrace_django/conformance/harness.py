"""What a provider supplies to run the kit: a harness that opens fresh, empty stores."""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Protocol

from millrace_django.clock import FakeClock
from millrace_django.contract import JobStorage, MonitoringStorage, WorkflowStorage


class StoreUnderTest(Protocol):
    """One isolated store; ``jobs``, ``workflows`` and ``monitoring`` share its data."""

    @property
    def jobs(self) -> JobStorage: ...

    @property
    def workflows(self) -> WorkflowStorage: ...

    @property
    def monitoring(self) -> MonitoringStorage: ...

    def end_thread(self) -> None:
        """Release what the calling thread holds (e.g. its database connection); the kit
        calls this at the end of every racer thread it starts."""
        ...


class StorageHarness(Protocol):
    """Opens a fresh, empty, isolated store bound to the kit's clock, and removes it on exit."""

    def open(self, clock: FakeClock) -> AbstractContextManager[StoreUnderTest]: ...
