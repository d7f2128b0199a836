"""Dashboard benchmark: server time of the main pages over a million jobs on PostgreSQL.

Creates its own database on the server named by ``MILLRACE_TEST_POSTGRES_URL``, migrates
it, inserts ``--jobs`` job rows in one ``INSERT ... SELECT generate_series`` (a realistic
mix: mostly finished, some failed, dead, waiting and running, three queues, a tenant),
then renders each page through Django's test client (the whole request: URL routing,
authorization, read model, template) and prints the median time and every SQL statement
the page ran, with its time. It asserts nothing; the database is dropped at the end.

    eval "$(scripts/testdb.sh start)"; .venv/bin/python bench/dashboard_bench.py [--jobs N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import psycopg
from pgserver import admin_connection, server_url
from psycopg import sql as pgsql

REPO = Path(__file__).resolve().parent.parent
TARGET_MS = 300.0
RUNS = 7

SEED = """
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
        WHEN n %% 100 < 88 THEN 3   -- succeeded
        WHEN n %% 100 < 92 THEN 5   -- dead
        WHEN n %% 100 < 94 THEN 6   -- cancelled
        WHEN n %% 100 < 96 THEN 1   -- enqueued
        WHEN n %% 100 < 97 THEN 0   -- scheduled
        WHEN n %% 100 < 98 THEN 4   -- failed, awaiting a retry
        WHEN n %% 100 < 99 THEN 7   -- awaiting its parent
        ELSE 2                     -- processing
    END AS state
) AS s
"""


def recreate(url: str, name: str, *, create: bool) -> None:
    drop = pgsql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(pgsql.Identifier(name))
    with admin_connection(url) as conn:
        for attempt in range(60):  # autovacuum may be analysing the fresh rows: wait for it
            try:
                conn.execute(drop)
                break
            except psycopg.errors.InsufficientPrivilege:
                if attempt == 59:
                    raise
                time.sleep(1)
        if create:
            conn.execute(pgsql.SQL("CREATE DATABASE {}").format(pgsql.Identifier(name)))


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


def seed(count: int) -> float:
    from datetime import UTC, datetime, timedelta

    from django.db import connection

    start = datetime.now(UTC) - timedelta(seconds=count * 0.5 + 3600)
    began = time.perf_counter()
    with connection.cursor() as cursor:
        cursor.execute(SEED, {"start": start, "count": count})
        cursor.execute("ANALYZE millrace_job")
    return time.perf_counter() - began


def measure(client: Any, path: str) -> tuple[float, list[dict[str, str]], int]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    client.get(path)  # warm the caches and the connection
    times = []
    for _ in range(RUNS):
        began = time.perf_counter()
        response = client.get(path)
        times.append((time.perf_counter() - began) * 1000)
    with CaptureQueriesContext(connection) as captured:
        client.get(path)
    return statistics.median(times), list(captured.captured_queries), response.status_code


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=1_000_000)
    arguments = parser.parse_args()
    url, name = server_url(), f"millrace_dashboard_bench_{os.getpid()}"
    recreate(url, name, create=True)
    try:
        setup_django(url, name)
        print(f"seeding {arguments.jobs:,} jobs ...", flush=True)
        print(f"seeded in {seed(arguments.jobs):.1f} s\n")
        from django.contrib.auth.models import User
        from django.test import Client

        client = Client()
        client.force_login(User.objects.create_superuser("bench", "b@example.com", "x"))
        from millrace_django.models import Job

        sample = Job.objects.filter(state=5).values_list("uuid", flat=True).first()
        pages = {
            "overview": "/admin/millrace/",
            "jobs list": "/admin/millrace/jobs/",
            "jobs list, filtered (state=dead, queue=emails)": "/admin/millrace/jobs/"
            "?state=dead&queue=emails",
            # The two states without a list index of their own (models.py says why).
            "jobs list, filtered (state=processing)": "/admin/millrace/jobs/?state=processing",
            "jobs list, filtered (state=succeeded)": "/admin/millrace/jobs/?state=succeeded",
            "jobs list, filtered (tenant=acme, created range)": "/admin/millrace/jobs/?tenant=acme"
            "&created_after=2000-01-01T00:00&created_before=2100-01-01T00:00",
            "jobs list, page 2": None,
            "job detail": f"/admin/millrace/jobs/{sample}/",
            "API jobs (limit 50)": "/admin/millrace/api/v1/jobs",
            "API statistics": "/admin/millrace/api/v1/statistics",
        }
        first = client.get("/admin/millrace/jobs/").content.decode()
        cursor = first.split("cursor=", 1)[1].split('"', 1)[0].replace("&amp;", "&")
        pages["jobs list, page 2"] = f"/admin/millrace/jobs/?cursor={cursor}"
        verdicts = []
        for label, path in pages.items():
            assert path is not None
            median, queries, status = measure(client, path)
            verdict = "met" if median < TARGET_MS else "NOT met"
            verdicts.append((label, median, verdict))
            print(
                f"== {label}: {median:.1f} ms median of {RUNS} (HTTP {status}, "
                f"target {TARGET_MS:.0f} ms {verdict})"
            )
            for query in queries:
                print(f"   {float(query['time']) * 1000:7.1f} ms  {query['sql']}")
            print()
        print("summary:")
        for label, median, verdict in verdicts:
            print(f"  {label:52s} {median:8.1f} ms  {verdict}")
    finally:
        from django.db import connections

        connections.close_all()
        recreate(url, name, create=False)


if __name__ == "__main__":
    main()
