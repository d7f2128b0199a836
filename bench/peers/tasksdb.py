"""django-tasks-db: Django 6.1's ``django.tasks`` with the database backend, run by the
peers' virtualenv.

Jobs are ``@task`` functions enqueued with ``Task.enqueue``; workers are ``manage.py
db_worker`` processes, which run one task at a time and poll (there is no LISTEN/NOTIFY).
There is no bulk enqueue: a batch is that many ``enqueue`` calls in one
``transaction.atomic()``. There is no cron, so no recurring figure. The best
configuration only shortens the idle poll from 1 s to 50 ms (it cannot speed a drain:
the worker polls only when idle).
"""

from __future__ import annotations

import os
import sys
import time
from importlib.metadata import version
from typing import Any

os.environ.setdefault("PEER_SYSTEM", "tasksdb")
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "peers.django_settings")

import django

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import connection, transaction  # noqa: E402
from django.tasks import task  # noqa: E402

from peers import harness  # noqa: E402

INTERVAL = {"default": "1", "best": "0.05"}


@task
def noop() -> None:
    """Does nothing."""


@task
def sleep_job() -> None:
    time.sleep(harness.SLEEP_SECONDS)


@task
def stamp(token: str) -> None:
    harness.stamp(token)


KINDS = {"noop": noop, "sleep": sleep_job}


def sql(statement: str) -> list[tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(statement)
        return list(cursor.fetchall()) if cursor.description else []


class TasksDB:
    name = "tasksdb"
    configs = {
        "default": "db_worker defaults (idle poll every 1 s, one task per process)",
        "best": "db_worker --interval 0.05 (idle poll every 50 ms)",
    }
    recurring_configs: tuple[str, ...] = ()

    def versions(self) -> dict[str, str]:
        return {"django-tasks-db": version("django-tasks-db"), "django": django.get_version()}

    def prepare(self) -> None:
        call_command("migrate", verbosity=0)

    def open(self) -> None:
        connection.ensure_connection()

    def close(self) -> None:
        connection.close()

    def clear(self) -> None:
        sql("TRUNCATE django_tasks_database_dbtaskresult")

    def enqueue_single(self, count: int) -> None:
        for _ in range(count):
            noop.enqueue()

    def enqueue_batched(self, count: int, batch: int) -> None:
        for start in range(0, count, batch):
            with transaction.atomic():
                for _ in range(min(batch, count - start)):
                    noop.enqueue()

    def enqueue_backlog(self, kind: str, count: int) -> None:
        with transaction.atomic():
            for _ in range(count):
                KINDS[kind].enqueue()

    def enqueue_stamp(self, token: str) -> None:
        stamp.enqueue(token)

    def remaining(self) -> int:
        rows = sql(
            "SELECT count(*) FROM django_tasks_database_dbtaskresult "
            "WHERE status IN ('READY', 'RUNNING')"
        )
        return int(rows[0][0])

    def drop_pending(self) -> None:
        sql("DELETE FROM django_tasks_database_dbtaskresult WHERE status = 'READY'")

    def worker_commands(self, config: str, processes: int) -> list[list[str]]:
        command = [sys.executable, "-m", "django", "db_worker", "--interval", INTERVAL[config]]
        return [command for _ in range(processes)]

    def recurring_commands(self, config: str) -> list[list[str]]:
        raise NotImplementedError("django-tasks-db has no recurring tasks")


def make_peer() -> TasksDB:
    return TasksDB()
