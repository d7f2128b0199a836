"""DBOS Transact, run by the workflow peers' virtualenv.

Workflows are ``@DBOS.workflow`` functions of ``@DBOS.step`` no-ops: ``linear`` calls
three steps; ``fan_out`` starts ten child workflows of one step each with
``DBOS.start_workflow`` and joins them (DBOS's way of running steps at once); ``waiter``
waits in ``DBOS.recv`` for one message, then runs one step. A backlog is enqueued on the
queue ``bench`` with ``DBOSClient.enqueue_in_transaction``, all in one transaction (so
visible at once, like Millrace's); messages are ``DBOSClient.send`` calls. The worker is
one process that launches DBOS with its defaults and the queue with its defaults, on a
database of its own.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from importlib.metadata import version
from typing import Any

import sqlalchemy as sa
from dbos import DBOS, DBOSClient, DBOSConfig

QUEUE = "bench"
TOPIC = "go"
FAN_OUT_BRANCHES = 10
RECV_SECONDS = 24 * 3600.0
"""How long a waiter waits: longer than any run, so that only a message completes it
(``recv`` returns ``None`` on timeout and the workflow would complete as if resumed)."""
WORKER_SECONDS = 6 * 3600.0
"""The longest a worker serves before it stops by itself (the bench stops it first)."""
TABLES = "dbos.workflow_status, dbos.operation_outputs, dbos.workflow_input, dbos.workflow_output"
"""What a run leaves (notifications, events and streams go with ``workflow_status``)."""
WORKFLOWS = {"linear": "linear", "fan_out": "fan_out", "signal": "waiter"}


def url() -> str:
    """The database URL in the form SQLAlchemy accepts (``postgresql://``)."""
    raw = os.environ["PEER_DB_URL"]
    return "postgresql://" + raw.split("://", 1)[1]


@DBOS.step()
def noop() -> None:
    """Does nothing."""


@DBOS.workflow()
def linear() -> None:
    noop()
    noop()
    noop()


@DBOS.workflow()
def branch() -> None:
    noop()


@DBOS.workflow()
def fan_out() -> None:
    handles = [DBOS.start_workflow(branch) for _ in range(FAN_OUT_BRANCHES)]
    for handle in handles:
        handle.get_result()


@DBOS.workflow()
def waiter() -> None:
    DBOS.recv(TOPIC, timeout_seconds=RECV_SECONDS)
    noop()


def configure() -> None:
    config: DBOSConfig = {"name": "workflow-bench", "system_database_url": url()}
    DBOS(config=config)


class DBOSPeer:
    name = "dbos"
    config = (
        "DBOS defaults (queue `bench` polled every 1 s, no concurrency limit, executor "
        "threads unbounded), one process; children started with DBOS.start_workflow"
    )

    def __init__(self) -> None:
        self.engine: sa.Engine | None = None
        self.client: Any = None

    def connect(self) -> tuple[sa.Engine, Any]:
        if self.engine is None:
            self.engine = sa.create_engine(url(), pool_size=2)
            self.client = DBOSClient(system_database_engine=self.engine)
        return self.engine, self.client

    def execute(self, statement: str, **params: Any) -> Any:
        """Run ``statement`` in a transaction of its own: its first column, if any."""
        engine, _ = self.connect()
        with engine.begin() as conn:
            result = conn.execute(sa.text(statement), params)
            return result.scalar() if result.returns_rows else None

    def versions(self) -> dict[str, str]:
        return {name: version(name) for name in ("dbos", "sqlalchemy", "psycopg")}

    def prepare(self) -> None:
        """Create DBOS's system tables and the queue (a launch does both)."""
        configure()
        DBOS.launch()
        DBOS.register_queue(QUEUE)
        DBOS.destroy()

    def clear(self) -> None:
        self.execute(f"TRUNCATE {TABLES} CASCADE")

    def start_backlog(self, workload: str, count: int) -> None:
        engine, client = self.connect()
        name = WORKFLOWS[workload]
        with engine.begin() as conn:
            for number in range(count):
                options: dict[str, Any] = {"workflow_name": name, "queue_name": QUEUE}
                if workload == "signal":
                    options["workflow_id"] = f"waiter-{number}"
                client.enqueue_in_transaction(conn, options)

    def completed(self, workload: str) -> int:
        return int(
            self.execute(
                "SELECT count(*) FROM dbos.workflow_status WHERE name = :name "
                "AND status = 'SUCCESS'",
                name=WORKFLOWS[workload],
            )
        )

    def waiting(self) -> int:
        """Waiters inside ``recv``: it records its timeout as a durable sleep first."""
        return int(
            self.execute(
                "SELECT count(DISTINCT workflow_uuid) FROM dbos.operation_outputs "
                "WHERE function_name = 'DBOS.sleep'"
            )
        )

    def send(self, number: int) -> None:
        _, client = self.connect()
        client.send(f"waiter-{number}", None, TOPIC)

    def worker_command(self) -> list[str]:
        return [sys.executable, "-m", "workflow_peers", self.name, "worker"]


def run_worker() -> None:
    """Launch DBOS with the queue and serve until SIGTERM."""
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    configure()
    DBOS.launch()
    DBOS.register_queue(QUEUE)
    stop.wait(WORKER_SECONDS)
    DBOS.destroy()


def make_peer() -> DBOSPeer:
    return DBOSPeer()
