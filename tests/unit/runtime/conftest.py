from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest

from millrace_django.clock import FakeClock
from millrace_django.engine import JobClient, Retry, set_default_client
from millrace_django.runtime import RuntimeSettings, Worker
from millrace_django.storage.memory import MemoryStorage
from millrace_django.testing import JobRunner
from tests.unit.runtime.helpers import WorkerThread
from tests.unit.runtime.jobs import board

FAST = timedelta(milliseconds=5)


@pytest.fixture(autouse=True)
def clean_board() -> Iterator[None]:
    board.reset()
    yield
    board.reset()


@pytest.fixture
def settings() -> RuntimeSettings:
    """Fast polling; leases and heartbeats in fake time (the clock only moves when told)."""
    return RuntimeSettings(
        queues=frozenset({"default", "emails"}),
        default_retry=Retry.none(),
        concurrency=4,
        lease=timedelta(seconds=30),
        heartbeat=timedelta(seconds=10),
        poll_min=FAST,
        poll_max=timedelta(milliseconds=20),
        shutdown_timeout=timedelta(seconds=5),
        shutdown_grace=timedelta(seconds=2),
        scheduler_interval=FAST,
        activation_batch=100,
        retention=timedelta(days=1),
        purge_batch=100,
    )


@pytest.fixture
def client(
    storage: MemoryStorage, clock: FakeClock, settings: RuntimeSettings
) -> Iterator[JobClient]:
    client = JobClient(storage, clock, settings)
    previous = set_default_client(client)
    yield client
    set_default_client(previous)


type StartWorker = Callable[..., WorkerThread]


@pytest.fixture
def start_worker(
    storage: MemoryStorage, clock: FakeClock, settings: RuntimeSettings
) -> Iterator[StartWorker]:
    """Start workers on threads (fast tick); every one is stopped when the test ends."""
    threads: list[WorkerThread] = []

    def start(*, until_idle: bool = False, **options: Any) -> WorkerThread:
        options.setdefault("tick", FAST)
        config = options.pop("config", settings)
        store = options.pop("storage", storage)
        worker = Worker(store, clock, config, **options)
        thread = WorkerThread(worker, until_idle=until_idle).start()
        threads.append(thread)
        return thread

    yield start
    for thread in threads:
        thread.close()


@pytest.fixture
def runner(settings: RuntimeSettings) -> Iterator[JobRunner]:
    """The test runner with these settings, installed as the default client."""
    runner = JobRunner(config=settings)
    with runner.installed():
        yield runner
