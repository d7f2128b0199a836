from __future__ import annotations

from collections.abc import Iterator

import pytest

from millrace_django.clock import FakeClock
from millrace_django.engine import EngineSettings, JobClient, Retry, set_default_client
from millrace_django.storage.memory import MemoryStorage
from tests.unit.engine import sample_jobs


@pytest.fixture
def config() -> EngineSettings:
    return EngineSettings(
        queues=frozenset({"default", "emails"}),
        default_retry=Retry.exponential(3),
        interruption_limit=10,
    )


@pytest.fixture
def client(storage: MemoryStorage, clock: FakeClock, config: EngineSettings) -> Iterator[JobClient]:
    """A client over fresh memory storage, also installed as the process default."""
    client = JobClient(storage, clock, config)
    previous = set_default_client(client)
    sample_jobs.calls.clear()
    yield client
    set_default_client(previous)
