"""Millrace (this repository), run by the project's virtualenv.

The workflows are ``workflow_bench_flows``'s; a backlog is started with one
``workflows.start_many`` (one atom: visible at once), messages are ``workflows.signal``
calls (one each; ``signal_many``, a hundred per call, in ``signal_batched``), and the
worker is ``manage.py millrace_worker`` (one process, its defaults) on the peer bench's
minimal Django project (``peers.django_settings``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from importlib.metadata import version
from typing import Any

os.environ.setdefault("PEER_SYSTEM", "millrace")
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "peers.django_settings")

import django

django.setup()

import workflow_bench_flows as flows  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402

from millrace_django import workflows  # noqa: E402
from millrace_django.contract import InstanceState  # noqa: E402
from millrace_django.models import INSTANCE_STATE_CODES  # noqa: E402

DEFINITIONS = {
    "linear": flows.THREE_STEPS,
    "fan_out": flows.FAN_OUT,
    "signal": flows.SIGNAL_ROUND_TRIP,
}
TABLES = (
    "millrace_job, millrace_job_attempt, millrace_job_log, millrace_job_tag, "
    "millrace_workflow_instance, millrace_bookmark"
)


def sql(statement: str, params: Any = None) -> list[tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(statement, params)
        return list(cursor.fetchall()) if cursor.description else []


def instances(workload: str, state: InstanceState) -> int:
    return int(
        sql(
            "SELECT count(*) FROM millrace_workflow_instance "
            "WHERE definition_id = %s AND state = %s",
            [DEFINITIONS[workload].id, INSTANCE_STATE_CODES[state]],
        )[0][0]
    )


class Millrace:
    name = "millrace"
    config = (
        "MILLRACE defaults (CLAIM_BATCH 64, CONCURRENCY max(8, 2 x CPUs) threads), "
        "one `manage.py millrace_worker` process; Django's CONN_MAX_AGE 0"
    )

    def versions(self) -> dict[str, str]:
        return {"millrace-django": version("millrace-django"), "django": django.get_version()}

    def prepare(self) -> None:
        call_command("migrate", verbosity=0)

    def clear(self) -> None:
        sql(f"TRUNCATE {TABLES}")

    def start_backlog(self, workload: str, count: int) -> None:
        workflows.start_many(DEFINITIONS[workload], ({"key": str(n)} for n in range(count)))

    def completed(self, workload: str) -> int:
        return instances(workload, InstanceState.COMPLETED)

    def waiting(self) -> int:
        return instances("signal", InstanceState.SUSPENDED)

    def send(self, number: int) -> None:
        if not workflows.signal(flows.SIGNAL_NAME, str(number)):
            raise RuntimeError(f"instance {number} was not waiting for its signal")

    def send_many(self, numbers: Sequence[int]) -> None:
        signals = [workflows.Signal(flows.SIGNAL_NAME, str(number)) for number in numbers]
        if not all(workflows.signal_many(signals)):
            raise RuntimeError(f"an instance among {numbers} was not waiting for its signal")

    def worker_command(self) -> list[str]:
        return [sys.executable, "-m", "django", "millrace_worker"]


def make_peer() -> Millrace:
    return Millrace()
