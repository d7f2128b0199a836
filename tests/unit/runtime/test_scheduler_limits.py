"""The scheduler forgets limit scopes idle for longer than any rate's period, so a keyed
limit does not keep a record per key ever seen; the limits still hold afterwards."""

from __future__ import annotations

from datetime import timedelta

from millrace_django.clock import FakeClock
from millrace_django.contract import MAX_RATE_PERIOD, ClaimRequest
from millrace_django.engine import JobClient
from millrace_django.runtime import RuntimeSettings, Scheduler
from millrace_django.storage.memory import MemoryStorage
from tests.unit.runtime import jobs

REQUEST = ClaimRequest(
    worker_id="w1", queues=frozenset({"default"}), max_count=10, lease=timedelta(hours=2)
)


def test_a_pass_forgets_the_scopes_idle_for_a_rates_longest_period(
    client: JobClient, storage: MemoryStorage, clock: FakeClock, settings: RuntimeSettings
) -> None:
    daily = jobs.record.using(rate="1/d")
    daily.enqueue("today")
    daily.enqueue("tomorrow")
    assert len(storage.claim(REQUEST)) == 1
    scheduler = Scheduler(storage, clock, settings)

    scheduler.run_once()
    assert storage.forget_idle_limits(clock.now(), 10) == 0, "kept: its day is not over"
    clock.advance(MAX_RATE_PERIOD + timedelta(seconds=1))
    scheduler.run_once()

    assert storage.forget_idle_limits(clock.now(), 10) == 0, "the pass forgot it already"
    assert len(storage.claim(REQUEST)) == 1  # the rate allows the next start, and no more
    assert storage.claim(REQUEST) == []
