"""pgqueuer on asyncpg, run by the peers' virtualenv.

Entrypoints are ``async def`` (pgqueuer accepts nothing else); enqueue is
``Queries.enqueue`` (one job, or lists for a batch); workers are processes running
``PgQueuer.run`` (LISTEN/NOTIFY, with its scheduler). The default configuration is
``run()``'s defaults (dequeue batches of 10); the best dequeues batches of 200, the
setting behind pgqueuer's published figures.
"""

from __future__ import annotations

import asyncio
import os
import signal
from importlib.metadata import version
from typing import Any

import asyncpg
from pgqueuer import PgQueuer
from pgqueuer.models import Job, Schedule
from pgqueuer.queries import Queries

from peers import harness

BATCH_SIZE = {"default": 10, "best": 200}
TABLES = "pgqueuer, pgqueuer_log"


def url() -> str:
    return os.environ["PEER_DB_URL"]


def register(pgq: PgQueuer) -> None:
    @pgq.entrypoint("noop")
    async def noop(job: Job) -> None:
        """Does nothing."""

    @pgq.entrypoint("sleep")
    async def sleep_job(job: Job) -> None:
        await asyncio.sleep(harness.SLEEP_SECONDS)

    @pgq.entrypoint("stamp")
    async def stamp(job: Job) -> None:
        harness.stamp((job.payload or b"").decode())

    if harness.recurring_enabled():

        @pgq.schedule("tick", "* * * * *")
        async def tick(schedule: Schedule) -> None:
            harness.stamp(harness.CRON_TOKEN)


class PgQueuerPeer:
    name = "pgqueuer"
    configs = {
        "default": "PgQueuer.run() defaults: dequeue batches of 10, asyncpg",
        "best": "batch_size=200, asyncpg",
    }
    recurring_configs = ("default",)

    def __init__(self) -> None:
        self.runner = asyncio.Runner()
        self.conn: Any = None
        self.queries: Queries | None = None

    def run(self, coroutine: Any) -> Any:
        return self.runner.run(coroutine)

    def versions(self) -> dict[str, str]:
        return {"pgqueuer": version("pgqueuer"), "asyncpg": version("asyncpg")}

    def prepare(self) -> None:
        self.open()
        assert self.queries is not None
        self.run(self.queries.install())
        self.close()

    def open(self) -> None:
        self.conn = self.run(asyncpg.connect(url()))
        self.queries = Queries.from_asyncpg_connection(self.conn)

    def close(self) -> None:
        if self.conn is not None:
            self.run(self.conn.close())
            self.conn = None
            self.queries = None

    def fetchval(self, statement: str) -> Any:
        if self.conn is None:
            self.open()
        return self.run(self.conn.fetchval(statement))

    def clear(self) -> None:
        self.fetchval(f"TRUNCATE {TABLES}")

    def enqueue_single(self, count: int) -> None:
        assert self.queries is not None
        for _ in range(count):
            self.run(self.queries.enqueue("noop", None))

    def enqueue_many(self, kind: str, count: int) -> None:
        assert self.queries is not None
        self.run(self.queries.enqueue([kind] * count, [None] * count, [0] * count))

    def enqueue_batched(self, count: int, batch: int) -> None:
        for start in range(0, count, batch):
            self.enqueue_many("noop", min(batch, count - start))

    def enqueue_backlog(self, kind: str, count: int) -> None:
        self.enqueue_many(kind, count)

    def enqueue_stamp(self, token: str) -> None:
        assert self.queries is not None
        self.run(self.queries.enqueue("stamp", token.encode()))

    def remaining(self) -> int:
        return int(self.fetchval("SELECT count(*) FROM pgqueuer"))

    def drop_pending(self) -> None:
        self.fetchval("DELETE FROM pgqueuer WHERE status = 'queued'")

    def worker_commands(self, config: str, processes: int) -> list[list[str]]:
        return [harness.python_command(self.name, "worker", config) for _ in range(processes)]

    def recurring_commands(self, config: str) -> list[list[str]]:
        return [harness.python_command(self.name, "worker", config)]


async def work(config: str) -> None:
    conn = await asyncpg.connect(url())
    pgq = PgQueuer.from_asyncpg_connection(conn)
    register(pgq)
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, pgq.shutdown.set)
    try:
        await pgq.run(batch_size=BATCH_SIZE[config])
    finally:
        await conn.close()


def run_worker(config: str) -> None:
    asyncio.run(work(config))


def make_peer() -> PgQueuerPeer:
    return PgQueuerPeer()
