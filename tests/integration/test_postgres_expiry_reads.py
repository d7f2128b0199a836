"""The scheduler's expiry sweep on PostgreSQL reads the jobs it ends, not the others:
jobs without a deadline, running or finished jobs have no entry in the index it reads.

Configured by MILLRACE_TEST_POSTGRES_URL (``scripts/testdb.sh`` starts a throwaway server);
skipped when unset, except in CI, where it fails.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from django.db import connections, transaction

from millrace_django.clock import FakeClock
from millrace_django.conformance.support import claim, make_job, succeed
from millrace_django.models import Job
from millrace_django.storage.orm import DjangoStorage, queries
from tests.conformance.django_harness import DjangoStoreUnderTest, require_alias
from tests.integration.test_postgres_hot_path import clock, store

ALIAS = "postgres"
require_alias(ALIAS, "MILLRACE_TEST_POSTGRES_URL")
pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True, databases=[ALIAS])]


__all__ = ["clock", "store"]  # the fixtures, shared


def _scans(plan: dict[str, Any]) -> list[tuple[str, str | None, int]]:
    """Every scan of ``plan``: its node type, index and rows read (all loops)."""
    here = []
    if "Scan" in plan["Node Type"]:
        rows = (plan["Actual Rows"] + plan.get("Rows Removed by Filter", 0)) * plan["Actual Loops"]
        here.append((plan["Node Type"], plan.get("Index Name"), rows))
    return here + [scan for child in plan.get("Plans", ()) for scan in _scans(child)]


def test_the_sweep_reads_only_unstarted_jobs_that_have_a_deadline(
    store: DjangoStoreUnderTest, clock: FakeClock
) -> None:
    storage: DjangoStorage = store.jobs
    start = clock.now()
    storage.enqueue([make_job(clock, queue="plain") for _ in range(2000)])
    with_deadline = [make_job(clock, expires_at=start + timedelta(minutes=5)) for _ in range(500)]
    storage.enqueue(with_deadline)
    finished = claim(store, "w1", max_count=450)  # started before their deadline
    storage.apply_many([succeed(job, clock) for job in finished])
    expiring = [make_job(clock, expires_at=start + timedelta(minutes=1)) for _ in range(30)]
    storage.enqueue(expiring)
    connection = connections[ALIAS]
    with connection.cursor() as cursor:
        cursor.execute(f'ANALYZE "{Job._meta.db_table}"')
    clock.set(start + timedelta(minutes=2))

    with transaction.atomic(using=ALIAS), connection.cursor() as cursor:
        sweep = queries.expiring(Job.objects.using(ALIAS), clock.now(), 100)
        sql, params = sweep.query.sql_with_params()
        cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql, params)
        (plan,) = cursor.fetchone()
    root = (json.loads(plan) if isinstance(plan, str) else plan)[0]["Plan"]

    scans = _scans(root)
    assert [(kind, index) for kind, index, _ in scans] == [
        ("Index Scan", "millrace_job_expiring")
    ], json.dumps(root, indent=1)
    assert scans[0][2] == len(expiring)
    assert storage.expire_due(clock.now(), 100) == len(expiring)
