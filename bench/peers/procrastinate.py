"""procrastinate (plain, with its psycopg connector), run by the peers' virtualenv.

Enqueue is the synchronous ``defer``/``batch_defer`` a Django view would call; workers are
``App.run_worker`` processes (LISTEN/NOTIFY on, as by default). The default
configuration runs synchronous job functions with the default concurrency of 1 (the
docs advise no concurrency for blocking tasks); the best runs ``async def`` jobs with 32
concurrent sub-workers and a connection pool to match.
"""

from __future__ import annotations

import asyncio
import os
import time
from importlib.metadata import version
from typing import Any

import procrastinate
import psycopg

from peers import harness

CONCURRENCY = {"default": 1, "best": 32}
app = procrastinate.App(
    connector=procrastinate.PsycopgConnector(conninfo=os.environ["PEER_DB_URL"])
)


@app.task(name="noop")
def noop() -> None:
    """Does nothing."""


@app.task(name="sleep")
def sleep_job() -> None:
    time.sleep(harness.SLEEP_SECONDS)


@app.task(name="anoop")
async def async_noop() -> None:
    """Does nothing, as a coroutine."""


@app.task(name="asleep")
async def async_sleep() -> None:
    await asyncio.sleep(harness.SLEEP_SECONDS)


@app.task(name="stamp")
def stamp(token: str) -> None:
    harness.stamp(token)


@app.task(name="astamp")
async def async_stamp(token: str) -> None:
    harness.stamp(token)


if harness.recurring_enabled():

    @app.periodic(cron="* * * * *")
    @app.task(name="tick")
    def tick(timestamp: int) -> None:
        harness.stamp(harness.CRON_TOKEN)


JOBS = {
    "default": {"noop": noop, "sleep": sleep_job, "stamp": stamp},
    "best": {"noop": async_noop, "sleep": async_sleep, "stamp": async_stamp},
}


class Procrastinate:
    name = "procrastinate"
    configs = {
        "default": "sync job functions, concurrency 1 (the default), LISTEN/NOTIFY",
        "best": "async def job functions, concurrency 32, pool of 34 connections",
    }
    recurring_configs = ("default",)

    def __init__(self) -> None:
        self.config = "default"
        self.opened: Any = None
        self.conn: psycopg.Connection[Any] | None = None

    def versions(self) -> dict[str, str]:
        return {"procrastinate": version("procrastinate"), "psycopg": psycopg.__version__}

    def prepare(self) -> None:
        with app.open():
            app.schema_manager.apply_schema()

    def open(self) -> None:
        self.opened = app.open()
        self.opened.__enter__()
        self.conn = psycopg.connect(os.environ["PEER_DB_URL"], autocommit=True)

    def close(self) -> None:
        if self.opened is not None:
            self.opened.__exit__(None, None, None)
            self.opened = None
        if self.conn is not None:
            self.conn.close()
            self.conn = None

    def sql(self, statement: str) -> list[tuple[Any, ...]]:
        if self.conn is None:
            with psycopg.connect(os.environ["PEER_DB_URL"], autocommit=True) as conn:
                cursor = conn.execute(statement)
                return cursor.fetchall() if cursor.description else []
        cursor = self.conn.execute(statement)
        return cursor.fetchall() if cursor.description else []

    def clear(self) -> None:
        self.sql("TRUNCATE procrastinate_jobs CASCADE")

    def enqueue_single(self, count: int) -> None:
        for _ in range(count):
            noop.defer()

    def enqueue_batched(self, count: int, batch: int) -> None:
        for start in range(0, count, batch):
            noop.batch_defer(*({} for _ in range(min(batch, count - start))))

    def enqueue_backlog(self, kind: str, count: int) -> None:
        JOBS[self.config][kind].batch_defer(*({} for _ in range(count)))

    def enqueue_stamp(self, token: str) -> None:
        JOBS[self.config]["stamp"].defer(token=token)

    def remaining(self) -> int:
        rows = self.sql("SELECT count(*) FROM procrastinate_jobs WHERE status IN ('todo', 'doing')")
        return int(rows[0][0])

    def drop_pending(self) -> None:
        self.sql("DELETE FROM procrastinate_jobs WHERE status = 'todo'")

    def worker_commands(self, config: str, processes: int) -> list[list[str]]:
        self.config = config
        return [harness.python_command(self.name, "worker", config) for _ in range(processes)]

    def recurring_commands(self, config: str) -> list[list[str]]:
        return [harness.python_command(self.name, "worker", config)]


def run_worker(config: str) -> None:
    concurrency = CONCURRENCY[config]
    worker_app = app
    if concurrency > 1:
        worker_app = app.with_connector(
            procrastinate.PsycopgConnector(
                conninfo=os.environ["PEER_DB_URL"],
                min_size=concurrency + 2,
                max_size=concurrency + 2,
            )
        )
    worker_app.run_worker(concurrency=concurrency)


def make_peer() -> Procrastinate:
    return Procrastinate()
