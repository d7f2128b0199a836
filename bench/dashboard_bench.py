"""Dashboard benchmark: server time and rows read of every monitoring page and endpoint
over millions of jobs on PostgreSQL.

Creates its own database on the server named by ``MILLRACE_TEST_POSTGRES_URL``, migrates
it, inserts ``--jobs`` job rows in one ``INSERT ... SELECT generate_series`` (three
queues, a tenant; the newest ``--active`` unfinished, as a backlog of minutes is, the
rest succeeded, dead or cancelled) and one workflow instance per 20 jobs, writes the
maintained tallies of what those rows finished (as migration 0007 does for rows it
finds), vacuums, then requests each page and endpoint through Django's test client (the
whole request: URL routing, authorization, read model, template). Per page it prints the
median time of ``--runs`` requests and each SELECT's rows read and widest plan node, from
``EXPLAIN ANALYZE`` (tests/dashboard/plans.py).

A page meets its target when its median is at most 100 ms and no plan node reads more
than ``FACTOR`` pages (page size + 1) plus the active rows (unfinished jobs and workflow
instances): a read that paid for history would read finished rows by the million. The
summary table is Markdown, for docs/benchmarks.md. The database is dropped at the end.

    eval "$(scripts/testdb.sh start)"; .venv/bin/python bench/dashboard_bench.py [--jobs N]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from pgserver import DURABILITY, recreate_database, server_url

REPO = Path(__file__).resolve().parent.parent
TARGET_MS = 100.0
FACTOR = 4
"""Pages a plan node may read: a filter that keeps a third of a state's rows has the
planner walk that state's index newest first, reading about three rows per row shown."""
LIST_PAGE = 25
"""The dashboard's list page (views.PAGE_SIZE); the API's default page is 50."""
API_PAGE = 50
BASE = "/admin/millrace/"
API = f"{BASE}api/v1/"

SEED_JOBS = """
INSERT INTO millrace_job (
    uuid, queue, state, priority, target, arguments, retry, created_at, due_at, worker_id,
    lease_until, attempt, failures, cancel_requested, tenant_id, last_error, finished_at
)
SELECT
    (lpad(to_hex(n), 12, '0') || '7000' || '8000' || lpad(to_hex(n), 12, '0'))::uuid,
    (ARRAY['default', 'emails', 'reports'])[1 + n %% 3],
    s.state,
    0,
    (ARRAY['shop.jobs:send_receipt', 'shop.jobs:sync_stock', 'reports.jobs:monthly'])[1 + n %% 3],
    '{"args": [42], "kwargs": {}}'::jsonb,
    '{"kind": "none", "max_attempts": 1, "base_delay_us": 0, "max_delay_us": 0,
      "jitter": false}'::jsonb,
    %(start)s::timestamptz + make_interval(secs => n * 0.5),
    CASE WHEN s.state IN (0, 4) THEN %(start)s::timestamptz + interval '30 days' END,
    CASE WHEN s.state = 2 THEN 'worker-' || (n %% 8) END,
    CASE WHEN s.state = 2 THEN %(start)s::timestamptz + interval '30 days' END,
    CASE WHEN s.state IN (0, 1, 7) THEN 0 ELSE 1 END,
    CASE WHEN s.state IN (4, 5) THEN 1 ELSE 0 END,
    false,
    CASE WHEN n %% 10 = 0 THEN 'acme' END,
    CASE WHEN s.state IN (4, 5) THEN 'ValueError: boom' END,
    CASE WHEN s.state IN (3, 5, 6)
        THEN %(start)s::timestamptz + make_interval(secs => n * 0.5 + 1) END
FROM generate_series(1, %(count)s) AS n
CROSS JOIN LATERAL (
    SELECT CASE
        WHEN n <= %(finished)s THEN CASE
            WHEN n %% 100 < 92 THEN 3   -- succeeded
            WHEN n %% 100 < 97 THEN 5   -- dead
            ELSE 6                     -- cancelled
        END
        WHEN n %% 20 < 10 THEN 1   -- enqueued
        WHEN n %% 20 < 14 THEN 0   -- scheduled
        WHEN n %% 20 < 16 THEN 4   -- failed, awaiting a retry
        WHEN n %% 20 < 19 THEN 7   -- awaiting its parent
        ELSE 2                     -- processing
    END AS state
) AS s
"""

SEED_INSTANCES = """
INSERT INTO millrace_workflow_instance (
    id, definition_id, definition_version, state, data, cursor, revision, tenant_id,
    created_at, updated_at
)
SELECT
    (lpad(to_hex(n), 12, '0') || '7000' || '9000' || lpad(to_hex(n), 12, '0'))::uuid,
    (ARRAY['shop.flows:checkout', 'reports.flows:close_month'])[1 + n %% 2],
    1,
    CASE
        WHEN n > %(finished)s THEN CASE WHEN n %% 10 < 7 THEN 0 ELSE 1 END  -- running, suspended
        WHEN n %% 100 < 85 THEN 2   -- completed
        WHEN n %% 100 < 92 THEN 3   -- failed
        WHEN n %% 100 < 96 THEN 4   -- compensated
        ELSE 5                     -- cancelled
    END,
    NULL,
    NULL,
    1,
    CASE WHEN n %% 10 = 0 THEN 'acme' END,
    %(start)s::timestamptz + make_interval(secs => n * 10),
    %(start)s::timestamptz + make_interval(secs => n * 10 + 5)
FROM generate_series(1, %(count)s) AS n
"""

# What migration 0007's count_what_finished_before writes for rows it finds, in SQL.
TALLIES = [
    """
    INSERT INTO millrace_tally (subject, state, queue, target, tenant_id, n)
    SELECT 0, state, queue, target, tenant_id, count(*) FROM millrace_job
    WHERE state IN (3, 5, 6) GROUP BY state, queue, target, tenant_id
    """,
    """
    INSERT INTO millrace_tally (subject, state, queue, target, tenant_id, n)
    SELECT 1, state, '', definition_id, tenant_id, count(*) FROM millrace_workflow_instance
    WHERE state IN (2, 3, 4, 5) GROUP BY state, definition_id, tenant_id
    """,
    """
    INSERT INTO millrace_finished_minute (minute, state, n)
    SELECT date_trunc('minute', finished_at, 'UTC'), state, count(*) FROM millrace_job
    WHERE state IN (3, 5) GROUP BY 1, 2
    """,
]
ACTIVE = """
SELECT (SELECT count(*) FROM millrace_job WHERE state IN (0, 1, 2, 4, 7))
     + (SELECT count(*) FROM millrace_workflow_instance WHERE state IN (0, 1))
"""


@dataclass(frozen=True, slots=True)
class Measured:
    """One page: its median time and the cost of each statement it ran."""

    label: str
    status: int
    median_ms: float
    costs: list[Any]  # tests.dashboard.plans.StatementCost
    page_size: int

    def widest(self) -> Any:
        return max(self.costs, key=lambda cost: cost.widest_rows, default=None)

    def bound(self, active: int) -> int:
        return (self.page_size + 1) * FACTOR + active

    def verdicts(self, active: int) -> tuple[bool, bool]:
        widest = self.widest()
        rows_ok = widest is None or widest.widest_rows <= self.bound(active)
        return self.status == 200 and self.median_ms <= TARGET_MS, rows_ok


def setup_django(url: str, name: str) -> None:
    sys.path.insert(0, str(REPO))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
    from django.conf import settings

    parts = urlsplit(url)
    settings.DATABASES["default"] = {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": name,
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": parts.hostname or "127.0.0.1",
        "PORT": str(parts.port or ""),
    }
    settings.DEBUG = False
    settings.ALLOWED_HOSTS = ["testserver"]
    settings.MILLRACE_DASHBOARD = {
        "AUTHORIZE": "millrace_django.dashboard.authorization.staff_with_permissions"
    }
    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", verbosity=0)


@contextmanager
def indexes_built_after(cursor: Any, table: str) -> Iterator[None]:
    """Drop ``table``'s indexes other than its constraints' and build them again on
    leaving: one sorted build is many times faster than ten million index insertions."""
    cursor.execute(
        "SELECT indexname, indexdef FROM pg_indexes WHERE tablename = %s AND indexname NOT IN"
        " (SELECT conname FROM pg_constraint WHERE conrelid = %s::regclass)",
        [table, table],
    )
    indexes = cursor.fetchall()
    for index, _ in indexes:
        cursor.execute(f'DROP INDEX "{index}"')
    yield
    for _, definition in indexes:
        cursor.execute(definition)


def seed(count: int, active: int) -> tuple[float, int]:
    """Insert ``count`` jobs, the newest ``active`` of them unfinished (and one workflow
    instance per 20 jobs, the newest tenth of ``active`` unfinished), and their tallies;
    the seconds it took, and the active rows."""
    from django.db import connection

    start = datetime.now(UTC) - timedelta(seconds=count * 0.5 + 3600)
    instances = max(count // 20, 1)
    began = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute("SET maintenance_work_mem = '512MB'")
        with indexes_built_after(cursor, "millrace_job"):
            cursor.execute(SEED_JOBS, {"start": start, "count": count, "finished": count - active})
        cursor.execute(
            SEED_INSTANCES,
            {"start": start, "count": instances, "finished": instances - active // 10},
        )
        for statement in TALLIES:
            cursor.execute(statement)
    # Autovacuum would mark the pages all-visible (index-only scans) soon after; do it
    # now rather than while pages are timed.
    with connection.cursor() as cursor:
        cursor.execute("VACUUM (ANALYZE)")
        cursor.execute(ACTIVE)
        (active,) = cursor.fetchone()
    return time.perf_counter() - began, int(active)


def pages(client: Any) -> dict[str, tuple[str, int]]:
    """Label -> (path, page size) of every page and endpoint a monitoring user reads."""
    from millrace_django.models import Job, WorkflowInstance

    job = Job.objects.filter(state=5).values_list("uuid", flat=True).first()
    instance = WorkflowInstance.objects.values_list("id", flat=True).first()
    first = client.get(f"{BASE}jobs/").content.decode()
    cursor = first.split("cursor=", 1)[1].split('"', 1)[0].replace("&amp;", "&")
    listed = {
        "overview": "",
        "overview, tenant": "?tenant=acme",
        "jobs": "jobs/",
        "jobs, page 2": f"jobs/?cursor={cursor}",
        **{f"jobs, {state}": f"jobs/?state={state}" for state in STATES},
        "jobs, queue": "jobs/?queue=emails",
        "jobs, tenant": "jobs/?tenant=acme",
        "jobs, untenanted": "jobs/?untenanted=on",
        "jobs, target prefix": "jobs/?target=shop.jobs:",
        "jobs, exact target": "jobs/?target=shop.jobs:send_receipt",
        "jobs, target + state": "jobs/?target=shop.jobs:sync_stock&state=dead",
        "jobs, created range": "jobs/?created_after=2000-01-01T00:00"
        "&created_before=2100-01-01T00:00",
        "job detail": f"jobs/{job}/",
        "queues": "queues/",
        "recurring": "recurring/",
        "instances": "instances/",
        "instances, running": "instances/?state=running",
        "instances, completed": "instances/?state=completed",
        "instance detail": f"instances/{instance}/",
        "metrics": "metrics",
    }
    api = {
        "API statistics": "statistics",
        "API statistics, tenant": "statistics?tenant=acme",
        "API jobs": "jobs",
        "API jobs, dead in a queue": "jobs?state=dead&queue=emails",
        "API jobs, tenant": "jobs?tenant=acme",
        "API jobs, target + state": "jobs?target=shop.jobs:send_receipt&state=succeeded",
        "API job": f"jobs/{job}",
        "API queues": "queues",
        "API recurring": "recurring",
        "API instances": "instances",
    }
    return {label: (BASE + path, LIST_PAGE) for label, path in listed.items()} | {
        label: (API + path, API_PAGE) for label, path in api.items()
    }


STATES = ("scheduled", "enqueued", "processing", "succeeded", "failed", "dead", "cancelled")
STATES += ("awaiting",)


def measure(client: Any, label: str, path: str, page_size: int, runs: int) -> Measured:
    from tests.dashboard.plans import statement_costs

    response = client.get(path)  # warm the caches and the connection
    times = []
    for _ in range(runs):
        began = time.perf_counter()
        client.get(path)
        times.append((time.perf_counter() - began) * 1000)
    costs = statement_costs("default", lambda: client.get(path))
    return Measured(label, response.status_code, statistics.median(times), costs, page_size)


def describe_machine() -> list[str]:
    from django.db import connection

    def git(*arguments: str) -> str:
        return subprocess.run(["git", *arguments], cwd=REPO, capture_output=True, text=True).stdout

    commit = git("rev-parse", "--short", "HEAD").strip()
    changed = len(git("status", "--porcelain", "--", "millrace_django").splitlines())
    if changed:  # the code measured is not the commit's: say so
        commit += f" with {changed} files of millrace_django/ changed"
    with connection.cursor() as cursor:
        cursor.execute("SHOW server_version")
        (version,) = cursor.fetchone()
        durability = []
        for setting in DURABILITY:
            cursor.execute(f"SHOW {setting}")
            durability.append(f"{setting}={cursor.fetchone()[0]}")
    return [
        f"date: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, commit {commit or '?'}",
        f"machine: {platform.machine()}, {os.cpu_count()} CPUs, PostgreSQL {version}, "
        + ", ".join(durability),
    ]


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def report(measured: Measured, active: int) -> None:
    fast, lean = measured.verdicts(active)
    print(
        f"== {measured.label}: {measured.median_ms:.1f} ms (HTTP {measured.status}), "
        f"{'met' if fast and lean else 'MISSED'}"
    )
    for cost in measured.costs:
        print(
            f"   {cost.rows_read:>10,} rows read, widest {cost.widest_rows:>10,} "
            f"{cost.widest_node}: {' '.join(cost.sql.split())[:160]}"
        )


def table(results: list[Measured], active: int) -> list[str]:
    lines = [
        "| page | median ms | statements | rows read | widest plan node (rows) | time | rows |",
        "|---|---:|---:|---:|---|---|---|",
    ]
    for measured in results:
        fast, lean = measured.verdicts(active)
        widest = measured.widest()
        node = f"{widest.widest_node} ({widest.widest_rows:,})" if widest else "-"
        lines.append(
            f"| {measured.label} | {measured.median_ms:.1f} | {len(measured.costs)} | "
            f"{sum(c.rows_read for c in measured.costs):,} | {node} | "
            f"{'ok' if fast else 'MISSED'} | {'ok' if lean else 'MISSED'} |"
        )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument(
        "--active", type=int, help="unfinished jobs, the newest (default: a tenth, at most 20,000)"
    )
    parser.add_argument("--runs", type=int, default=7, help="requests timed per page")
    arguments = parser.parse_args()
    unfinished = min(arguments.jobs // 10, 20_000) if arguments.active is None else arguments.active
    url, name = server_url(), f"millrace_dashboard_bench_{os.getpid()}"
    recreate_database(url, name, create=True)
    try:
        setup_django(url, name)
        print(f"seeding {arguments.jobs:,} jobs ...", flush=True)
        took, active = seed(arguments.jobs, unfinished)
        print(f"seeded in {took:.1f} s; {active:,} active jobs and instances\n", flush=True)
        from django.contrib.auth.models import User
        from django.test import Client

        client = Client()
        client.force_login(User.objects.create_superuser("bench", "b@example.com", "x"))
        load_before, machine = loadavg(), describe_machine()  # as the pages are read
        results = []
        for label, (path, page_size) in pages(client).items():
            results.append(measure(client, label, path, page_size, arguments.runs))
            report(results[-1], active)
        print(f"\n{arguments.jobs:,} jobs, {active:,} active jobs and instances")
        for line in machine:
            print(line)
        print(f"load average (1/5/15 min): {load_before} before, {loadavg()} after")
        print(
            f"target: median of {arguments.runs} <= {TARGET_MS:.0f} ms; no plan node reads "
            f"more than {FACTOR} x (page + 1) + {active:,} active rows\n"
        )
        print("\n".join(table(results, active)))
        missed = [m.label for m in results if not all(m.verdicts(active))]
        verdict = "MISSED: " + ", ".join(missed) if missed else "every page met its target"
        print(f"\nverdict: {verdict}")
    finally:
        from django.db import connections

        connections.close_all()
        recreate_database(url, name, create=False)


if __name__ == "__main__":
    main()
