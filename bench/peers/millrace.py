"""Millrace (this repository), run by the project's virtualenv.

Jobs are ``@job`` functions enqueued through the default client; workers are
``manage.py millrace_worker --processes N`` (with its scheduler, as by default) on a
minimal Django project (``peers.django_settings``).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from importlib.metadata import version
from typing import Any

os.environ.setdefault("PEER_SYSTEM", "millrace")
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "peers.django_settings")

import django

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402

from millrace_django import job, jobs  # noqa: E402
from millrace_django.contract import JobState  # noqa: E402
from millrace_django.models import JOB_STATE_CODES  # noqa: E402
from peers import harness  # noqa: E402

SETTINGS = {
    "default": {},
    "best": {"CLAIM_BATCH": 500, "CONCURRENCY": 200, "ASYNC_CONCURRENCY": 1000},
}
"""``MILLRACE`` of each configuration; ``best`` is bench/worker_bench.py's best drain
(``CONCURRENCY`` 200) with claims of 500, which drained 30,000 no-op jobs 4 to 20 % faster
than claims of 200 in interleaved pairs on one and four processes (and 1,000 no faster),
and room for 1,000 coroutines (its 10 ms job is async)."""
RECURRING_SETTINGS = {
    "default": {},
    "best": {"SCHEDULER_INTERVAL": 0.1},
}
TABLES = (
    "millrace_job, millrace_job_attempt, millrace_job_log, millrace_job_tag, millrace_recurring"
)
UNFINISHED = "SELECT " + " + ".join(
    f"(SELECT count(*) FROM millrace_job WHERE state IN ({', '.join(map(str, codes))}))"
    for codes in (
        [JOB_STATE_CODES[JobState.ENQUEUED]],
        [JOB_STATE_CODES[JobState.PROCESSING]],
        sorted(JOB_STATE_CODES[s] for s in (JobState.SCHEDULED, JobState.FAILED)),
        [JOB_STATE_CODES[JobState.AWAITING]],
    )
)
"""Jobs not finished, counted one partial index at a time (each condition is the
predicate of an index: ready, leased, due, monitor_state), so that a count reads the
unfinished jobs' index entries, not every job drained so far as a scan of the table
would: the finished ones stay in it."""


@job
def noop() -> None:
    """Does nothing."""


@job
async def sleep_job() -> None:
    """The 10 ms job as a coroutine, as pgqueuer's (which runs nothing else): the worker's
    event loop runs many at once, under ``ASYNC_CONCURRENCY``."""
    await asyncio.sleep(harness.SLEEP_SECONDS)


@job
def stamp(token: str) -> None:
    harness.stamp(token)


@job
def tick() -> None:
    harness.stamp(harness.CRON_TOKEN)


JOBS = {"noop": noop, "sleep": sleep_job}


def sql(statement: str, params: Any = None) -> list[tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        return list(cursor.fetchall()) if cursor.description else []


class Millrace:
    name = "millrace"
    configs = {
        "default": "MILLRACE defaults: CLAIM_BATCH 64, CONCURRENCY max(8, 2 x CPUs) threads, "
        "ASYNC_CONCURRENCY 500; the 10 ms job is async def, the no-op a plain function",
        "best": "CLAIM_BATCH 500, CONCURRENCY 200, ASYNC_CONCURRENCY 1000; jobs as by default",
    }
    recurring_configs = ("default", "best")

    def versions(self) -> dict[str, str]:
        return {"millrace-django": version("millrace-django"), "django": django.get_version()}

    def prepare(self) -> None:
        call_command("migrate", verbosity=0)

    def open(self) -> None:
        connection.ensure_connection()

    def close(self) -> None:
        connection.close()

    def clear(self) -> None:
        sql(f"TRUNCATE {TABLES}")

    def enqueue_single(self, count: int) -> None:
        for _ in range(count):
            noop.enqueue()

    def enqueue_batched(self, count: int, batch: int) -> None:
        for start in range(0, count, batch):
            with jobs.batch() as b:
                for _ in range(min(batch, count - start)):
                    b.enqueue(noop)

    def enqueue_backlog(self, kind: str, count: int) -> None:
        with jobs.batch() as b:
            for _ in range(count):
                b.enqueue(JOBS[kind])

    def enqueue_stamp(self, token: str) -> None:
        stamp.enqueue(token)

    def remaining(self) -> int:
        return int(sql(UNFINISHED)[0][0])

    def drop_pending(self) -> None:
        enqueued = JOB_STATE_CODES[JobState.ENQUEUED]
        sql("DELETE FROM millrace_job WHERE state = %s", [enqueued])

    def worker_commands(self, config: str, processes: int) -> list[list[str]]:
        os.environ["PEER_MILLRACE"] = json.dumps(SETTINGS[config])
        return [[sys.executable, "-m", "django", "millrace_worker", "--processes", str(processes)]]

    def recurring_commands(self, config: str) -> list[list[str]]:
        jobs.upsert_recurring("tick", tick, cron="* * * * *")
        os.environ["PEER_MILLRACE"] = json.dumps(RECURRING_SETTINGS[config])
        return [[sys.executable, "-m", "django", "millrace_worker"]]


def make_peer() -> Millrace:
    return Millrace()
