"""Recurring definitions fired by several schedulers while they are SIGKILLed and
restarted: each occurrence fires exactly once, and missed occurrences collapse into one
fire.

Every definition runs each minute. Each round the test makes all of them due at a past
instant (minutes ago: several missed occurrences) and SIGKILLs one scheduler while the
others fire; the supervisor restarts it. The transition journal records each fire (the
due time it consumed) in the firing transaction.
"""

from __future__ import annotations

import time
from collections import Counter
from datetime import UTC, datetime, timedelta
from functools import partial

import psycopg

from millrace_django.contract import JobState
from millrace_django.engine import JobClient
from tests.reliability.harness import jobs, journal
from tests.reliability.harness.processes import wait_until
from tests.reliability.harness.rig import Rig
from tests.reliability.harness.scale import SCALE
from tests.reliability.scenarios import postgres_marks, stop_all

pytestmark = postgres_marks()

MISSED_MINUTES = 5
"""How far in the past each round's due time lies: five missed occurrences."""


def test_schedulers_killed_while_firing_fire_each_occurrence_exactly_once(
    client: JobClient, rig: Rig
) -> None:
    definitions = [f"every-minute-{n}" for n in range(SCALE.recurring_definitions)]
    for recurring_id in definitions:
        client.upsert_recurring(recurring_id, jobs.work, cron="* * * * *", args=[0.0])
    names = [f"scheduler-{n}" for n in range(SCALE.recurring_schedulers)]
    for name in names:
        rig.supervisor.scheduler(name)
    for name in names:
        rig.supervisor.wait_started(name)

    forced: list[datetime] = []
    with psycopg.connect(rig.url, autocommit=True) as connection:
        for round_number in range(SCALE.recurring_rounds):
            # A distinct instant per round, minutes ago: one occurrence per round.
            due = datetime.now(UTC) - timedelta(minutes=MISSED_MINUTES, milliseconds=round_number)
            forced.append(due)
            connection.execute(
                "UPDATE millrace_recurring SET next_fire_time = %s WHERE id = ANY(%s)",
                (due, definitions),
            )
            time.sleep(0.05 * (round_number % 3))  # kill at varying points of the passes
            rig.supervisor.kill(names[round_number % len(names)])
            done = partial(_all_fired, connection, definitions, due)
            wait_until(done, 30, f"round {round_number + 1} fired")
    for name in names:  # restarted ones are up again, so a SIGTERM is a clean stop
        rig.supervisor.wait_started(name)
    assert stop_all(rig) == [0] * len(names)

    fires = [f for f in journal.fires(rig.url) if f.definition in definitions]
    report = rig.check({}, others=JobState.ENQUEUED)  # fired, and no worker ran
    fired_jobs = Counter(a.row.recurring_id for a in report.audits.values() if a.row)
    print(report.summary(), f"fires {len(fires)}")
    report.assert_clean()
    assert rig.supervisor.restarts == SCALE.recurring_rounds
    per_definition = Counter(f.definition for f in fires)
    # One job per fire, one fire per occurrence (never two for one due time)...
    assert fired_jobs == per_definition
    assert Counter((f.definition, f.fired_due) for f in fires).most_common(1)[0][1] == 1
    for due in forced:  # ...and each forced round fired once per definition,
        fired = Counter(f.definition for f in fires if f.fired_due == due)
        assert fired == dict.fromkeys(definitions, 1)
    for fire in fires:  # missed occurrences collapsed: the next is the minute after now
        assert fire.next_due is not None
        assert timedelta(seconds=-1) < fire.next_due - fire.at <= timedelta(seconds=61)


def _all_fired(connection: psycopg.Connection, definitions: list[str], due: datetime) -> bool:
    """Whether no definition is still due at ``due`` (each fired that occurrence)."""
    return not connection.execute(
        "SELECT 1 FROM millrace_recurring WHERE id = ANY(%s) AND next_fire_time <= %s",
        (definitions, due),
    ).fetchone()
