"""Celery on a local Redis broker, run by the peers' virtualenv.

Tasks are enqueued with ``delay`` (a batch: ``apply_async`` in a loop on one producer,
Celery having no bulk publish); no result backend, as by default. Workers are ``celery
worker`` processes; recurring runs use ``celery beat`` with ``crontab()``. Celery records
nothing when a task ends, so each task adds itself to a counter in Redis (flushed by a
thread every 10 ms, not a round trip per task): that counter is how the harness sees
a drain finish. A backlog is published to a staging list and renamed onto the worker's
queue in one step (``RENAME``), so that it appears at once, as a committed batch does in
the database-backed systems.

Default: the prefork pool with one child per measured process (``--concurrency N``),
prefetch multiplier 4. Best: N worker processes each with the threads pool
(``--concurrency 32``), prefetch multiplier 64, no gossip, mingle or heartbeat.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from importlib.metadata import version
from typing import Any

import redis
from celery import Celery
from celery.schedules import crontab

from peers import harness

QUEUE = "celery"
STAGING = "peer-staging"
DONE_KEY = "peer:done"
app = Celery("peers", broker=os.environ["PEER_REDIS_URL"])
app.conf.update(
    task_ignore_result=True,
    worker_hijack_root_logger=False,
    broker_connection_retry_on_startup=True,
)
if os.environ.get("PEER_CELERY_CONFIG") == "best":
    app.conf.worker_prefetch_multiplier = 64
if harness.recurring_enabled():
    app.conf.beat_schedule = {"tick": {"task": "peers.celery.tick", "schedule": crontab()}}

_done = 0
_lock = threading.Lock()
_flusher: threading.Thread | None = None


def flush_forever() -> None:
    global _done
    client = redis.Redis.from_url(os.environ["PEER_REDIS_URL"])
    while True:
        time.sleep(0.01)
        with _lock:
            count, _done = _done, 0
        if count:
            client.incrby(DONE_KEY, count)


def count_done() -> None:
    global _done, _flusher
    with _lock:
        _done += 1
        if _flusher is None:
            _flusher = threading.Thread(target=flush_forever, daemon=True)
            _flusher.start()


@app.task(name="peers.celery.noop")
def noop() -> None:
    count_done()


@app.task(name="peers.celery.sleep")
def sleep_job() -> None:
    time.sleep(harness.SLEEP_SECONDS)
    count_done()


@app.task(name="peers.celery.stamp")
def stamp(token: str) -> None:
    harness.stamp(token)
    count_done()


@app.task(name="peers.celery.tick")
def tick() -> None:
    harness.stamp(harness.CRON_TOKEN)


KINDS = {"noop": noop, "sleep": sleep_job}


class CeleryPeer:
    name = "celery"
    configs = {
        "default": "prefork pool, one child per process measured, prefetch x4, no result backend",
        "best": "threads pool of 32 per process, prefetch x64, no gossip/mingle/heartbeat",
    }
    recurring_configs = ("default",)

    def __init__(self) -> None:
        self.redis = redis.Redis.from_url(os.environ["PEER_REDIS_URL"])
        self.expected = 0

    def versions(self) -> dict[str, str]:
        server = self.redis.info("server")["redis_version"]
        return {"celery": version("celery"), "kombu": version("kombu"), "redis-server": server}

    def prepare(self) -> None:
        self.redis.flushdb()

    def open(self) -> None:
        self.redis.ping()

    def close(self) -> None:
        self.redis.close()

    def clear(self) -> None:
        self.redis.delete(QUEUE, STAGING, DONE_KEY)
        self.expected = 0

    def enqueue_single(self, count: int) -> None:
        for _ in range(count):
            noop.delay()

    def publish(self, kind: str, count: int, queue: str) -> None:
        with app.producer_or_acquire() as producer:
            for _ in range(count):
                KINDS[kind].apply_async(producer=producer, queue=queue)

    def enqueue_batched(self, count: int, batch: int) -> None:
        for start in range(0, count, batch):
            self.publish("noop", min(batch, count - start), QUEUE)

    def enqueue_backlog(self, kind: str, count: int) -> None:
        self.publish(kind, count, STAGING)
        self.expected += count
        self.redis.rename(STAGING, QUEUE)

    def enqueue_stamp(self, token: str) -> None:
        self.expected += 1
        stamp.delay(token)

    def remaining(self) -> int:
        return self.expected - int(self.redis.get(DONE_KEY) or 0)

    def drop_pending(self) -> None:
        self.redis.delete(QUEUE)

    def worker_commands(self, config: str, processes: int) -> list[list[str]]:
        os.environ["PEER_CELERY_CONFIG"] = config
        base = [
            sys.executable,
            "-m",
            "celery",
            "-A",
            "peers.celery",
            "worker",
            "-Q",
            QUEUE,
            "--loglevel",
            "WARNING",
        ]
        if config == "default":
            return [[*base, "--pool", "prefork", "--concurrency", str(processes)]]
        best = [
            "--pool",
            "threads",
            "--concurrency",
            "32",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
        ]
        return [[*base, *best, "-n", f"peer{n}@%h"] for n in range(processes)]

    def recurring_commands(self, config: str) -> list[list[str]]:
        schedule = os.path.join(os.environ.get("PEER_TMP", "/tmp"), f"celerybeat-{os.getpid()}")
        return [
            *self.worker_commands(config, 1),
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "peers.celery",
                "beat",
                "--loglevel",
                "WARNING",
                "--schedule",
                schedule,
            ],
        ]


def run_worker(*_: Any) -> None:
    raise SystemExit("Celery workers run as `celery worker` (see worker_commands)")


def make_peer() -> CeleryPeer:
    return CeleryPeer()
