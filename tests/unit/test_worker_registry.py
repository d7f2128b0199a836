"""``runtime.registry``: a worker's registry row, written on each heartbeat."""

from __future__ import annotations

from datetime import timedelta

from millrace_django.clock import FakeClock
from millrace_django.runtime.worker_registry import WorkerRegistration
from millrace_django.storage.memory import MemoryStorage


def test_each_beat_replaces_the_row_with_the_clocks_now_and_the_jobs_in_flight() -> None:
    clock = FakeClock()
    storage = MemoryStorage(clock)
    registration = WorkerRegistration(
        storage, clock, worker_id="w1", queues=["a", "b"], concurrency=4, hostname="h", pid=7
    )
    started = clock.now()
    assert registration.beat(2)
    clock.advance(timedelta(seconds=30))
    assert registration.beat(3)

    (row,) = storage.list_workers()
    assert (row.worker_id, row.hostname, row.pid) == ("w1", "h", 7)
    assert (row.queues, row.concurrency, row.in_flight) == (frozenset({"a", "b"}), 4, 3)
    assert (row.started_at, row.seen_at) == (started, clock.now())


class _Failing:
    def record_worker_heartbeat(self, heartbeat: object) -> None:
        raise RuntimeError("database down")


def test_a_failed_write_or_a_storage_without_a_registry_is_not_the_workers_problem() -> None:
    clock = FakeClock()
    for storage in (_Failing(), object()):
        registration = WorkerRegistration(
            storage,  # type: ignore[arg-type]
            clock,
            worker_id="w1",
            queues=["a"],
            concurrency=1,
        )
        assert registration.beat(0) is False
