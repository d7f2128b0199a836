"""The base every fact group derives from: the fixtures a provider's binding fills in.

Bind a provider by subclassing the suites and overriding the ``harness`` fixture (and
``contention``, for a store that runs one writer at a time)::

    class TestMyJobs(JobStorageFacts):
        contention = SINGLE_WRITER_CONTENTION

        @pytest.fixture
        def harness(self) -> StorageHarness:
            return MyHarness()
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import ClassVar

import pytest

from millrace_django.clock import FakeClock
from millrace_django.conformance.contention import FULL_CONTENTION, Contention
from millrace_django.conformance.harness import StorageHarness, StoreUnderTest


class FactGroup:
    """A group of facts under one heading of the facts page."""

    heading: ClassVar[str] = ""
    contention: Contention = FULL_CONTENTION
    """How hard its race facts race; a binding scales it to its store (an instance may
    too, to run one fact at another contention)."""

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
