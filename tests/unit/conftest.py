"""Fixtures shared by the engine and runtime unit tests: a fake clock and memory storage."""

from __future__ import annotations

import pytest

from millrace_django.clock import FakeClock
from millrace_django.storage.memory import MemoryStorage


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def storage(clock: FakeClock) -> MemoryStorage:
    return MemoryStorage(clock)
