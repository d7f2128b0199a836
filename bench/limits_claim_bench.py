"""What flow-control limits cost a PostgreSQL claim of jobs without limits (see
docs/flow-control.md): the server's execution time of the plain claim statement as it
is, against the same statement without its limited-lane parts (``NOT limited`` and the
probe of waiting limited jobs) reading the ready index as it was before the lane, and
with the lane's filter alone. Interleaved, each run in a transaction rolled back, over
one backlog of plain jobs in a database of its own (dropped at the end). Prints figures,
asserts nothing.

    eval "$(scripts/testdb.sh start)"; .venv/bin/python bench/limits_claim_bench.py
"""

from __future__ import annotations

import json
import os
import statistics
import sys
from datetime import timedelta
from pathlib import Path

from pgserver import recreate_database, server_url

REPO = Path(__file__).resolve().parent.parent
ALIAS = "postgres"
BACKLOG = 3_000
BATCH = 64
ROUNDS = 300
BEFORE_INDEX = (
    "CREATE INDEX millrace_job_ready_before ON millrace_job (queue, priority DESC, seq) "
    "WHERE state = 1"
)


def main() -> None:
    url = server_url()
    name = f"millrace_limits_claim_bench_{os.getpid()}"
    recreate_database(url, name, create=True)
    os.environ["MILLRACE_TEST_POSTGRES_URL"] = url.rsplit("/", 1)[0] + "/" + name
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
    sys.path.insert(0, str(REPO))
    try:
        run()
    finally:
        from django.db import connections

        connections[ALIAS].close()
        recreate_database(url, name, create=False)


def run() -> None:
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connections, transaction

    from millrace_django.clock import FakeClock, SystemClock
    from millrace_django.conformance.support import make_job
    from millrace_django.storage.orm import DjangoStorage
    from millrace_django.storage.orm.postgresql.statements import CLAIM_ONE_QUEUE

    call_command("migrate", database=ALIAS, verbosity=0)
    connection = connections[ALIAS]
    DjangoStorage(ALIAS, SystemClock()).enqueue([make_job(FakeClock()) for _ in range(BACKLOG)])
    with connection.cursor() as cursor:
        cursor.execute(BEFORE_INDEX)  # the ready index as it was before the limited lane
        cursor.execute("ANALYZE millrace_job")

    now = SystemClock().now()
    params = {
        "queue": "default",
        "limit": BATCH,
        "now": now,
        "worker": "bench",
        "until": now + timedelta(minutes=5),
    }
    current = CLAIM_ONE_QUEUE.sql
    plain, _, _ = current.partition("), waiting AS (")
    lane_only = plain + ")\nSELECT * FROM leased ORDER BY priority DESC, seq\n"
    before = lane_only.replace(" AND NOT limited", "").replace("\n      AND NOT limited", "")
    assert "limited" not in before
    statements = {"as it is": current, "lane filter only": lane_only, "before limits": before}
    times: dict[str, list[float]] = {label: [] for label in statements}
    for round_ in range(ROUNDS):
        order = list(statements.items())
        for label, sql in order if round_ % 2 else order[::-1]:
            with transaction.atomic(using=ALIAS), connection.cursor() as cursor:
                cursor.execute("EXPLAIN (ANALYZE, TIMING OFF, FORMAT JSON) " + sql, params)
                plan = cursor.fetchone()[0]
                transaction.set_rollback(True, using=ALIAS)
            plan = plan if isinstance(plan, list) else json.loads(plan)
            times[label].append(plan[0]["Execution Time"] * 1000)

    print(f"claim of {BATCH} plain jobs from a backlog of {BACKLOG}, {ROUNDS} runs each")
    print("server execution time (us):   median     p10     p90")
    for label, values in times.items():
        values.sort()
        decile = len(values) // 10
        print(
            f"  {label:<26} {statistics.median(values):7.0f} {values[decile]:7.0f} "
            f"{values[-decile]:7.0f}"
        )


if __name__ == "__main__":
    main()
