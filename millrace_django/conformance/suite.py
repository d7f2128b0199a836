"""The base every fact group derives from: the fixtures a provider's binding fills in.

Bind a provider by subclassing the suites and overriding the ``harness`` fixture::

    class TestMyJobs(JobStorageFacts):
        @pytest.fixture
        def harness(self) -> StorageHarness:
            return MyHarness()
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import ClassVar

import pytest

from millrace_django.clock import FakeClock
from millrace_django.conformance.harness import StorageHarness, StoreUnderTest


class FactGroup:
    """A group of facts under one heading of the facts page."""

    heading: ClassVar[str] = ""

    @pytest.fixture
    def harness(self) -> StorageHarness:
        raise NotImplementedError("bind the kit: override the `harness` fixture")

    @pytest.fixture
    def clock(self) -> FakeClock:
        return FakeClock()

    @pytest.fixture
    def store(self, harness: StorageHarness, clock: FakeClock) -> Iterator[StoreUnderTest]:
        with harness.open(clock) as store:
            yield store
