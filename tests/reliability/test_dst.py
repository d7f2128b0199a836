"""Daylight-saving days in named time zones, through the real scheduler pass on
PostgreSQL: two scheduler nodes pass every five minutes of a fake clock across each
transition, and the transition journal lists the occurrences they fired.

The documented policy (``docs/guarantees.md``): a local time skipped by spring-forward
fires once, at the first valid instant after it (several skipped times are that one
instant, so they fire once); a local time repeated by fall-back fires once, at its
first occurrence. The expected instants below are written out by hand from the zones'
2026 transitions, not computed by the code under test.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connections

from millrace_django.clock import FakeClock
from millrace_django.engine import JobClient, Retry
from millrace_django.models import Job
from millrace_django.runtime import RuntimeSettings, Scheduler
from millrace_django.storage.orm import DjangoStorage
from tests.reliability.harness import jobs, journal
from tests.reliability.harness.rig import url_of
from tests.reliability.scenarios import ALIAS, postgres_marks

pytestmark = postgres_marks()

STEP = timedelta(minutes=5)
HALF_WINDOW = timedelta(hours=4)
DAILY = "30 2 * * *"
"""02:30 local: skipped on spring-forward days, repeated on fall-back days."""
HOURLY = "0 * * * *"


def utc(day: str, *hours: int) -> list[datetime]:
    """Instants on ``day`` (``YYYY-MM-DD``) at each of ``hours`` o'clock UTC."""
    base = datetime.fromisoformat(day).replace(tzinfo=UTC)
    return [base + timedelta(hours=hour) for hour in hours]


CASES = {
    # Berlin: 29 Mar 01:00 UTC, 02:00 CET -> 03:00 CEST.
    "Europe/Berlin spring forward": (
        "Europe/Berlin",
        utc("2026-03-29", 1)[0],
        {
            HOURLY: utc("2026-03-28", 22, 23) + utc("2026-03-29", 0, 1, 2, 3, 4, 5),
            DAILY: utc("2026-03-29", 1),  # 02:30 never happens: fires at the jump
        },
    ),
    # Berlin: 25 Oct 01:00 UTC, 03:00 CEST -> 02:00 CET.
    "Europe/Berlin fall back": (
        "Europe/Berlin",
        utc("2026-10-25", 1)[0],
        {
            HOURLY: utc("2026-10-24", 22, 23) + utc("2026-10-25", 0, 2, 3, 4, 5),  # no 01:00
            DAILY: [datetime(2026, 10, 25, 0, 30, tzinfo=UTC)],  # 02:30 CEST, not CET too
        },
    ),
    # New York: 8 Mar 07:00 UTC, 02:00 EST -> 03:00 EDT.
    "America/New_York spring forward": (
        "America/New_York",
        utc("2026-03-08", 7)[0],
        {
            HOURLY: utc("2026-03-08", 4, 5, 6, 7, 8, 9, 10, 11),
            DAILY: utc("2026-03-08", 7),
        },
    ),
    # New York: 1 Nov 06:00 UTC, 02:00 EDT -> 01:00 EST.
    "America/New_York fall back": (
        "America/New_York",
        utc("2026-11-01", 6)[0],
        {
            HOURLY: utc("2026-11-01", 3, 4, 5, 7, 8, 9, 10),  # 01:00 EST (06:00) skipped
            DAILY: [datetime(2026, 11, 1, 7, 30, tzinfo=UTC)],  # 02:30 EST, once
        },
    ),
}


@pytest.fixture
def journaled() -> Iterator[str]:
    url = url_of(ALIAS)
    journal.install(url)
    yield url
    journal.uninstall(url)
    connections[ALIAS].close()


@pytest.mark.parametrize("case", list(CASES))
def test_a_dst_day_fires_each_local_occurrence_once_by_the_documented_policy(
    journaled: str, case: str
) -> None:
    zone, transition, expected = CASES[case]
    start, end = transition - HALF_WINDOW, transition + HALF_WINDOW
    clock = FakeClock(start)
    storage = DjangoStorage(ALIAS, clock)
    settings = RuntimeSettings(default_retry=Retry.none(), retention=None)
    client = JobClient(storage, clock, settings)
    for cron in expected:
        client.upsert_recurring(cron, jobs.work, cron=cron, timezone=zone, args=[0.0])
    nodes = [Scheduler(storage, clock, settings) for _ in range(2)]
    fired_by_node = [0, 0]

    while clock.now() <= end:
        for index, node in enumerate(nodes):  # both nodes pass at every instant
            fired_by_node[index] += node.run_once().fired
        clock.advance(STEP)

    fires = journal.fires(journaled)
    for cron, instants in expected.items():
        assert [f.fired_due for f in fires if f.definition == cron] == instants, cron
    assert sum(fired_by_node) == len(fires) == sum(len(i) for i in expected.values())
    for cron, instants in expected.items():  # one job per fire
        assert Job.objects.using(ALIAS).filter(recurring_id=cron).count() == len(instants)
