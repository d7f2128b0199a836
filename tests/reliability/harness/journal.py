"""The transition journal: every state change of every job, written by the database.

The provider keeps only the last few bad attempts of a job, which cannot show a state
path. A row trigger installed for the test (PostgreSQL only) appends one journal row per
insert and per change of ``state`` or ``attempt`` to ``reliability_journal``, in the
same transaction as the change, so a rolled-back write leaves nothing and a committed
one cannot be missed. Lease renewals are not journaled. Recurring fires are journaled
from ``millrace_recurring`` the same way: one row per update that consumes the due time
(``last_fire_time`` becomes the old ``next_fire_time``), which is what a fire writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from uuid import UUID

import psycopg

from millrace_django.contract import JobState
from millrace_django.models import JOB_STATES

_INSTALL = """
CREATE TABLE IF NOT EXISTS reliability_journal (
    seq bigserial PRIMARY KEY,
    job uuid NOT NULL,
    old_state smallint,
    new_state smallint NOT NULL,
    old_attempt integer,
    new_attempt integer NOT NULL,
    old_worker text,
    new_worker text,
    old_lease timestamptz,
    failures integer NOT NULL,
    at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE TABLE IF NOT EXISTS reliability_fires (
    seq bigserial PRIMARY KEY,
    definition text NOT NULL,
    fired_due timestamptz,
    next_due timestamptz,
    at timestamptz NOT NULL DEFAULT clock_timestamp()
);
CREATE OR REPLACE FUNCTION reliability_journal_job() RETURNS trigger AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO reliability_journal (job, new_state, new_attempt, new_worker, failures)
        VALUES (NEW.uuid, NEW.state, NEW.attempt, NEW.worker_id, NEW.failures);
    ELSE
        INSERT INTO reliability_journal
            (job, old_state, new_state, old_attempt, new_attempt, old_worker, new_worker,
             old_lease, failures)
        VALUES (NEW.uuid, OLD.state, NEW.state, OLD.attempt, NEW.attempt, OLD.worker_id,
                NEW.worker_id, OLD.lease_until, NEW.failures);
    END IF;
    RETURN NULL;
END $$ LANGUAGE plpgsql;
CREATE OR REPLACE FUNCTION reliability_journal_fire() RETURNS trigger AS $$
BEGIN
    INSERT INTO reliability_fires (definition, fired_due, next_due)
    VALUES (NEW.id, OLD.next_fire_time, NEW.next_fire_time);
    RETURN NULL;
END $$ LANGUAGE plpgsql;
DROP TRIGGER IF EXISTS reliability_journal_insert ON millrace_job;
CREATE TRIGGER reliability_journal_insert AFTER INSERT ON millrace_job
    FOR EACH ROW EXECUTE FUNCTION reliability_journal_job();
DROP TRIGGER IF EXISTS reliability_journal_update ON millrace_job;
CREATE TRIGGER reliability_journal_update AFTER UPDATE ON millrace_job
    FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state
                       OR OLD.attempt IS DISTINCT FROM NEW.attempt)
    EXECUTE FUNCTION reliability_journal_job();
DROP TRIGGER IF EXISTS reliability_journal_fire ON millrace_recurring;
CREATE TRIGGER reliability_journal_fire AFTER UPDATE ON millrace_recurring
    FOR EACH ROW WHEN (OLD.next_fire_time IS DISTINCT FROM NEW.next_fire_time
                       AND NEW.last_fire_time IS NOT DISTINCT FROM OLD.next_fire_time)
    EXECUTE FUNCTION reliability_journal_fire();
TRUNCATE reliability_journal, reliability_fires;
"""

_UNINSTALL = """
DROP TRIGGER IF EXISTS reliability_journal_insert ON millrace_job;
DROP TRIGGER IF EXISTS reliability_journal_update ON millrace_job;
DROP TRIGGER IF EXISTS reliability_journal_fire ON millrace_recurring;
DROP TABLE IF EXISTS reliability_journal, reliability_fires;
DROP FUNCTION IF EXISTS reliability_journal_job(), reliability_journal_fire();
"""


@dataclass(frozen=True, slots=True)
class Step:
    """One journaled change of a job (``source`` is ``None`` for its insert)."""

    seq: int
    job_id: UUID
    source: JobState | None
    target: JobState
    old_attempt: int | None
    attempt: int
    old_worker: str | None
    worker: str | None
    old_lease: datetime | None
    failures: int
    at: datetime

    def __str__(self) -> str:
        source = (
            "inserted" if self.source is None else f"{self.source} (attempt {self.old_attempt})"
        )
        owner = f" by {self.worker}" if self.target is JobState.PROCESSING else ""
        return (
            f"{self.at:%H:%M:%S.%f} {source} -> {self.target} (attempt {self.attempt}, "
            f"failures {self.failures}){owner}"
        )


@dataclass(frozen=True, slots=True)
class Fire:
    """One fire of a recurring definition: the due time it consumed and the next one."""

    definition: str
    fired_due: datetime | None
    next_due: datetime | None
    at: datetime


def install(url: str) -> None:
    """Install (or reinstall) the triggers on the migrated database at ``url`` and
    empty the journal."""
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute(_INSTALL)


def uninstall(url: str) -> None:
    with psycopg.connect(url, autocommit=True) as connection:
        connection.execute(_UNINSTALL)


def steps(url: str) -> dict[UUID, list[Step]]:
    """Every job's journaled changes, in the order they committed."""
    found: dict[UUID, list[Step]] = {}
    with psycopg.connect(url) as connection:
        rows = connection.execute(
            "SELECT seq, job, old_state, new_state, old_attempt, new_attempt, old_worker,"
            " new_worker, old_lease, failures, at FROM reliability_journal ORDER BY seq"
        ).fetchall()
    for seq, job, old, new, old_attempt, attempt, old_worker, worker, lease, fails, at in rows:
        found.setdefault(job, []).append(
            Step(
                seq=seq,
                job_id=job,
                source=None if old is None else JOB_STATES[old],
                target=JOB_STATES[new],
                old_attempt=old_attempt,
                attempt=attempt,
                old_worker=old_worker,
                worker=worker,
                old_lease=lease,
                failures=fails,
                at=at,
            )
        )
    return found


def fires(url: str) -> list[Fire]:
    """Every journaled change of a recurring definition's due time, in commit order."""
    with psycopg.connect(url) as connection:
        rows = connection.execute(
            "SELECT definition, fired_due, next_due, at FROM reliability_fires ORDER BY seq"
        ).fetchall()
    return [Fire(definition, fired, following, at) for definition, fired, following, at in rows]
