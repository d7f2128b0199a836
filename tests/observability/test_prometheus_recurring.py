"""The recurring gauges are alarms: a definition an operator disabled (or one overlap
``queue`` holds back) is neither overdue nor lagging, however old its fire time."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from millrace_django.clock import FakeClock
from millrace_django.contract import Invocation, RecurringRecord
from millrace_django.observability.prometheus import collect
from millrace_django.storage.memory import MemoryStorage

START = datetime(2026, 3, 1, tzinfo=UTC)


def _definition(recurring_id: str, next_fire_time: datetime) -> RecurringRecord:
    return RecurringRecord(
        id=recurring_id,
        cron="0 3 * * *",
        queue="default",
        invocation=Invocation(target="tests.nowhere:job"),
        next_fire_time=next_fire_time,
        created_at=START,
        updated_at=START,
    )


def _recurring_gauges(storage: MemoryStorage, now: datetime) -> tuple[float, float]:
    families = {
        family.name: family
        for family in collect(storage, now=now, queues=["default"], gone_before=now)
    }
    overdue = families["millrace_recurring_overdue_definitions"].samples[0][1]
    lag = families["millrace_recurring_next_fire_lag_seconds"].samples[0][1]
    return overdue, lag


def test_a_disabled_definition_neither_is_overdue_nor_lags() -> None:
    clock = FakeClock(START)
    storage = MemoryStorage(clock)
    storage.upsert_recurring(_definition("disabled", START - timedelta(days=3)))
    storage.upsert_recurring(_definition("late", START - timedelta(minutes=2)))
    assert storage.disable_recurring("disabled")

    assert _recurring_gauges(storage, START) == (1, 120.0)
    assert storage.disable_recurring("late")
    assert _recurring_gauges(storage, START) == (0, 0)
