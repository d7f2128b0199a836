"""The raw-SQL upper bound: psycopg and one table, nothing else.

A job is a row; a partial index holds the ready ones. A worker claims 100 at a time
(``FOR UPDATE SKIP LOCKED`` inside one ``UPDATE``), runs them (the 10 ms ones on a thread
per job of the claim) and completes them with one set-based ``UPDATE ... WHERE id =
ANY(...)``. When nothing is ready it waits on ``LISTEN``; every enqueue transaction sends
one ``NOTIFY``. No retries, leases, payload checks or results: the floor of what a
PostgreSQL queue on this machine can cost, not a usable system.
"""

from __future__ import annotations

import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import psycopg

from peers import harness

CLAIM = 100
CHANNEL = "raw_job"
SCHEMA = """
CREATE TABLE IF NOT EXISTS raw_job (
    id bigserial PRIMARY KEY,
    kind text NOT NULL,
    token text,
    state smallint NOT NULL DEFAULT 0,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS raw_job_ready ON raw_job (id) WHERE state = 0;
"""
CLAIM_SQL = """
UPDATE raw_job SET state = 1 WHERE id IN (
    SELECT id FROM raw_job WHERE state = 0 ORDER BY id LIMIT %s FOR UPDATE SKIP LOCKED
) RETURNING id, kind, token
"""


def url() -> str:
    return os.environ["PEER_DB_URL"]


class RawSQL:
    name = "rawsql"
    configs = {"bound": "psycopg, claims of 100 with SKIP LOCKED, one set-based completion"}
    recurring_configs: tuple[str, ...] = ()

    def __init__(self) -> None:
        self.conn: psycopg.Connection[Any] | None = None

    def versions(self) -> dict[str, str]:
        return {"psycopg": psycopg.__version__}

    def prepare(self) -> None:
        with psycopg.connect(url(), autocommit=True) as conn:
            conn.execute(SCHEMA)

    def open(self) -> None:
        self.conn = psycopg.connect(url(), autocommit=True)

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def connection(self) -> psycopg.Connection[Any]:
        if self.conn is None:
            self.open()
        assert self.conn is not None
        return self.conn

    def clear(self) -> None:
        self.connection().execute("TRUNCATE raw_job")

    def enqueue_single(self, count: int) -> None:
        conn = self.connection()
        for _ in range(count):
            with conn.transaction():
                conn.execute("INSERT INTO raw_job (kind) VALUES ('noop')")
                conn.execute(f"NOTIFY {CHANNEL}")

    def enqueue_batched(self, count: int, batch: int) -> None:
        for start in range(0, count, batch):
            self.copy_in("noop", min(batch, count - start))

    def copy_in(self, kind: str, count: int) -> None:
        conn = self.connection()
        with conn.transaction():
            with conn.cursor().copy("COPY raw_job (kind) FROM STDIN") as copy:
                for _ in range(count):
                    copy.write_row((kind,))
            conn.execute(f"NOTIFY {CHANNEL}")

    def enqueue_backlog(self, kind: str, count: int) -> None:
        self.copy_in(kind, count)

    def enqueue_stamp(self, token: str) -> None:
        conn = self.connection()
        with conn.transaction():
            conn.execute("INSERT INTO raw_job (kind, token) VALUES ('stamp', %s)", (token,))
            conn.execute(f"NOTIFY {CHANNEL}")

    def remaining(self) -> int:
        row = self.connection().execute("SELECT count(*) FROM raw_job WHERE state < 2").fetchone()
        return int(row[0]) if row else 0

    def drop_pending(self) -> None:
        self.connection().execute("DELETE FROM raw_job WHERE state = 0")

    def worker_commands(self, config: str, processes: int) -> list[list[str]]:
        return [harness.python_command(self.name, "worker") for _ in range(processes)]

    def recurring_commands(self, config: str) -> list[list[str]]:
        raise NotImplementedError("the raw bound has no scheduler")


def run_job(job: tuple[int, str, str | None]) -> None:
    _, kind, token = job
    if kind == "sleep":
        time.sleep(harness.SLEEP_SECONDS)
    elif kind == "stamp" and token:
        harness.stamp(token)


def run_worker() -> None:
    """Claim, run, complete; wait on LISTEN when idle. SIGTERM stops it between claims."""
    stopping = False

    def stop(*_: object) -> None:
        nonlocal stopping
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    pool = ThreadPoolExecutor(CLAIM)
    with psycopg.connect(url(), autocommit=True) as conn:
        conn.execute(f"LISTEN {CHANNEL}")
        while not stopping:
            jobs = conn.execute(CLAIM_SQL, (CLAIM,)).fetchall()
            if not jobs:
                for _ in conn.notifies(timeout=0.5, stop_after=1):
                    pass
                continue
            if any(kind == "sleep" for _, kind, _ in jobs):
                list(pool.map(run_job, jobs))
            else:
                for job in jobs:
                    run_job(job)
            conn.execute("UPDATE raw_job SET state = 2 WHERE id = ANY(%s)", ([j[0] for j in jobs],))
    pool.shutdown()


def make_peer() -> RawSQL:
    return RawSQL()
