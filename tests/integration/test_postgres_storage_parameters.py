"""The job table's per-table autovacuum settings are set by the migrations on PostgreSQL
(the soak's measurement of them: docs/benchmarks.md).

Configured by MILLRACE_TEST_POSTGRES_URL; skipped when unset, except in CI, where it fails.
"""

from __future__ import annotations

from django.db import connections

from tests.conformance.django_harness import server_marks

pytestmark = server_marks("postgres", "MILLRACE_TEST_POSTGRES_URL")


def test_the_job_table_is_vacuumed_when_a_hundredth_of_it_is_dead() -> None:
    with connections["postgres"].cursor() as cursor:
        cursor.execute("SELECT reloptions FROM pg_class WHERE relname = 'millrace_job'")
        (options,) = cursor.fetchone()
    assert set(options) == {
        "autovacuum_vacuum_scale_factor=0.01",
        "autovacuum_vacuum_threshold=1000",
        "autovacuum_vacuum_insert_scale_factor=0.01",
        "autovacuum_analyze_scale_factor=0.02",
        "autovacuum_vacuum_cost_delay=0",
    }
