"""The limited lane of the claim as SQL Server gets it, compiled without a server (see
``test_sqlserver_sql.py`` for how): candidates skip locked rows, scope rows are waited
for in scope order, and running jobs are counted among the jobs in flight only."""

from __future__ import annotations

from millrace_django.models import Job, Limit
from millrace_django.storage.orm import limits, queries
from tests.unit.test_sqlserver_sql import NOW, READPAST, alias, compiled, order_by, top

__all__ = ["alias"]  # the fixture, shared


def test_limited_candidates_skip_locked_rows_in_claim_order_by_the_clocks_now(alias: str) -> None:
    jobs = Job.objects.using(alias)
    ready, ready_params = compiled(limits.ready_limited(jobs, {"a", "b"}, NOW, 40), alias)
    expired, expired_params = compiled(limits.expired_limited(jobs, {"a", "b"}, NOW, 40), alias)

    for sql, params in ((ready, ready_params), (expired, expired_params)):
        assert f"FROM [millrace_job] {READPAST}" in sql
        assert top(sql) == 40
        assert order_by(sql) == "[millrace_job].[priority] DESC, [millrace_job].[seq] ASC"
        assert "[millrace_job].[limited]" in sql and True in params
        assert NOW in params
        assert "[millrace_paused_queue]" in sql
    assert "[millrace_job].[expires_at] > %s" in ready
    assert "[millrace_job].[lease_until] <= %s" in expired


def test_limited_candidates_of_full_scopes_are_passed_over(alias: str) -> None:
    jobs = Job.objects.using(alias)
    sql, params = compiled(limits.ready_limited(jobs, {"a"}, NOW, 40, {"job:t#k"}), alias)

    assert "NOT ([millrace_job].[limit_key] IN (%s)" in sql
    assert "job:t#k" in params


def test_the_plain_claim_reads_only_jobs_without_limits(alias: str) -> None:
    jobs = Job.objects.using(alias)
    for query in (
        queries.claim_candidates(jobs, {"a"}, NOW, 5),
        queries.expired_candidates(jobs, {"a"}, NOW, 5),
    ):
        sql, params = compiled(query, alias)
        assert "[millrace_job].[limited] = %s" in sql and False in params


def test_scope_rows_are_waited_for_in_scope_order(alias: str) -> None:
    sql, params = compiled(
        limits.scope_rows(Limit.objects.using(alias), ["job:b", "queue:a"]), alias
    )
    assert "WITH (ROWLOCK, UPDLOCK)" in sql and "READPAST" not in sql
    assert order_by(sql).startswith("[millrace_limit].[scope] ASC")
    assert params == ("job:b", "queue:a")


def test_running_jobs_are_counted_among_the_processing_ones(alias: str) -> None:
    sql, params = compiled(limits.running_limits(Job.objects.using(alias)), alias)
    assert "[millrace_job].[state] = %s" in sql and 2 in params
    assert "[millrace_job].[limited] = %s" in sql


def test_waiting_limited_jobs_are_counted_per_value_of_limits_from_the_limited_lane(
    alias: str,
) -> None:
    sql, params = compiled(limits.waiting_limits(Job.objects.using(alias)), alias)
    assert "GROUP BY [millrace_job].[limits]" in sql
    assert "[millrace_job].[state] = %s" in sql and 1 in params
    assert "[millrace_job].[limited] = %s" in sql and True in params
