"""The SQL the provider sends SQL Server, compiled by mssql-django without a server.

No SQL Server runs on our machines, so these facts check the T-SQL text: the row-lock
hints that make claims skip each other's rows, ``TOP``, the claim order, and that every
instant is a parameter from the storage's clock (never the server's own time). The whole
kit runs against a real server only when ``MILLRACE_TEST_SQLSERVER_URL`` is set
(``tests/conformance/test_django_sqlserver.py``).

How to compile without a server: mssql-django asks the server its version once per alias
and caches the answer on the class, so seeding that cache for a made-up alias avoids the
connection; ``select_for_update`` asks the connection whether it is in autocommit mode,
which is stubbed for the compilation. pyodbc (which mssql-django imports) needs Debian's
``unixodbc`` (``scripts/testdb.sh deps`` installs it).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import pytest
from django.db import connections
from django.db.models import Q, QuerySet
from django.db.models.sql.subqueries import UpdateQuery

from millrace_django.contract import ACTIVE_JOB_STATES, JobState, JobTransition
from millrace_django.models import Bookmark, Job, Recurring, Tally, WorkflowInstance
from millrace_django.models import JobStateCode as Code
from millrace_django.storage.orm import catalog, queries
from millrace_django.storage.orm.transitions import moved
from millrace_django.storage.orm.vendors import Vendor, vendor_for
from millrace_django.storage.orm.vendors.sqlserver import SQLServer

try:
    import mssql.base as mssql_base
except Exception as error:  # ImproperlyConfigured when pyodbc cannot load libodbc
    reason = f"mssql-django cannot be imported ({error}); install unixodbc and the mssql extra"
    if os.environ.get("CI"):
        pytest.fail(reason, pytrace=False)
    pytest.skip(reason, allow_module_level=True)

ALIAS = "sqlserver_compiled"
NOW = datetime(2031, 7, 4, 12, 30, 15, 123456, tzinfo=UTC)
JOB_ID = UUID("0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b")
READPAST = "WITH (ROWLOCK, UPDLOCK, READPAST)"
SERVER_TIME = re.compile(
    r"GETDATE|GETUTCDATE|SYSDATETIME|SYSUTCDATETIME|SYSDATETIMEOFFSET|CURRENT_TIMESTAMP",
    re.IGNORECASE,
)


@pytest.fixture
def alias(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A SQL Server alias that never connects: version caches seeded, autocommit stubbed."""
    configured = connections.configure_settings(
        {
            "default": {"ENGINE": "django.db.backends.dummy"},
            ALIAS: {"ENGINE": "mssql", "NAME": "millrace", "HOST": "sqlserver.invalid"},
        }
    )
    connections.settings[ALIAS] = configured[ALIAS]
    mssql_base.DatabaseWrapper._known_versions[ALIAS] = 2022
    mssql_base.DatabaseWrapper._known_azures[ALIAS] = False
    monkeypatch.setattr(connections[ALIAS], "get_autocommit", lambda: False)
    try:
        yield ALIAS
    finally:
        if hasattr(connections._connections, ALIAS):
            delattr(connections._connections, ALIAS)
        del connections.settings[ALIAS]
        mssql_base.DatabaseWrapper._known_versions.pop(ALIAS, None)
        mssql_base.DatabaseWrapper._known_azures.pop(ALIAS, None)


@pytest.fixture
def vendor(alias: str) -> Vendor:
    return vendor_for(connections[alias])


def compiled(queryset: QuerySet[Any], alias: str) -> tuple[str, tuple[Any, ...]]:
    sql, params = queryset.query.get_compiler(using=alias).as_sql()
    assert not SERVER_TIME.search(sql), f"the database's own time is read: {sql}"
    return sql, tuple(params)


def compiled_update(
    queryset: QuerySet[Any], values: dict[str, Any], alias: str
) -> tuple[str, tuple[Any, ...]]:
    """The ``UPDATE`` that ``queryset.update(**values)`` would send."""
    query = queryset.query.chain(UpdateQuery)
    query.add_update_values(values)
    sql, params = query.get_compiler(using=alias).as_sql()
    assert not SERVER_TIME.search(sql), f"the database's own time is read: {sql}"
    return sql, tuple(params)


def top(sql: str) -> int:
    match = re.search(r"\bTOP\s*\(?\s*(\d+)\s*\)?", sql)
    assert match, f"no TOP in {sql}"
    return int(match.group(1))


def order_by(sql: str) -> str:
    return sql[sql.index(" ORDER BY ") + len(" ORDER BY ") :]


def transition(target: JobState, **fields: Any) -> JobTransition:
    return JobTransition(
        job_id=JOB_ID,
        expected_worker_id="worker-7",
        expected_attempt=3,
        target=target,
        failures=0,
        **fields,
    )


def test_the_alias_is_sql_server_through_mssql_django(vendor: Vendor) -> None:
    assert isinstance(vendor, SQLServer)


def test_a_claim_skips_locked_rows_takes_the_top_n_by_priority_then_insertion_order(
    alias: str,
) -> None:
    jobs = Job.objects.using(alias)
    ready, ready_params = compiled(
        queries.claim_candidates(jobs, {"emails", "default"}, NOW, 25), alias
    )
    expired, expired_params = compiled(
        queries.expired_candidates(jobs, {"emails", "default"}, NOW, 25), alias
    )

    for sql, params in ((ready, ready_params), (expired, expired_params)):
        assert f"FROM [millrace_job] {READPAST}" in sql
        assert top(sql) == 25
        assert order_by(sql) == "[millrace_job].[priority] DESC, [millrace_job].[seq] ASC"
        assert {"default", "emails"} <= set(params)
    assert "[millrace_job].[state] = %s" in ready and 1 in ready_params
    assert NOW in expired_params, "the expired-lease test must compare with the clock's now"
    assert "[millrace_job].[expires_at] > %s" in ready and NOW in ready_params, (
        "an enqueued job past its deadline by the clock's now is never claimed"
    )
    assert "[millrace_job].[lease_until] <= %s" in expired


def test_the_apply_fence_waits_for_the_row_lock_instead_of_skipping_it(alias: str) -> None:
    t = transition(JobState.SUCCEEDED)
    sql, params = compiled(queries.fenced(Job.objects.using(alias), t)[:1], alias)

    assert "FROM [millrace_job] WITH (ROWLOCK, UPDLOCK)" in sql
    assert "READPAST" not in sql, "a skipped row would fail a fence that holds"
    for column in ("uuid", "state", "worker_id", "attempt"):
        assert f"[millrace_job].[{column}] = %s" in sql
    assert {JOB_ID.hex, Code.PROCESSING, "worker-7", 3} <= set(params)


def test_the_fenced_update_stamps_the_clocks_now_on_a_finished_job(alias: str) -> None:
    sql, params = compiled_update(
        Job.objects.using(alias).filter(seq=41), moved(transition(JobState.SUCCEEDED), NOW), alias
    )

    assert sql.removeprefix("SET NOCOUNT OFF; ").startswith("UPDATE [millrace_job] SET")
    assert "[finished_at] = %s" in sql
    assert NOW in params
    assert "WHERE [millrace_job].[seq] = %s" in sql


@pytest.mark.parametrize(("unstarted", "attempt"), [(False, 3), (True, 2)])
def test_a_release_keeps_the_claims_attempt_and_a_give_back_lowers_it_by_one(
    alias: str, unstarted: bool, attempt: int
) -> None:
    sql, params = compiled_update(
        Job.objects.using(alias).filter(seq=41),
        moved(transition(JobState.ENQUEUED, unstarted=unstarted), NOW),
        alias,
    )

    assigned = re.findall(r"\[(\w+)\] = %s", sql[: sql.index(" WHERE ")])
    values = dict(zip(assigned, params, strict=False))
    assert values["attempt"] == attempt
    assert (values["state"], values["worker_id"], values["due_at"]) == (Code.ENQUEUED, None, None)


def test_a_batch_acknowledgement_is_one_update_with_per_row_values(alias: str) -> None:
    t = transition(JobState.SUCCEEDED)
    sql, params = compiled_update(
        Job.objects.using(alias).filter(seq__in=[41, 42]),
        queries.completed({41: t, 42: t}, NOW),
        alias,
    )

    assert sql.count("UPDATE [millrace_job]") == 1
    assert "[finished_at] = CASE WHEN ([millrace_job].[seq] = %s) THEN %s" in sql
    assert params.count(NOW) == 2

    fence_sql, _ = compiled(queries.fenced_batch(Job.objects.using(alias), [t, t]), alias)
    assert "WITH (ROWLOCK, UPDLOCK)" in fence_sql
    assert "READPAST" not in fence_sql


def test_activation_skips_locked_rows_and_takes_the_oldest_due_first(alias: str) -> None:
    sql, params = compiled(queries.due(Job.objects.using(alias), NOW, 50), alias)

    assert f"FROM [millrace_job] {READPAST}" in sql
    assert sql.startswith("SELECT TOP 50 [millrace_job].[seq] AS [seq], [millrace_job].[queue]")
    assert order_by(sql) == "[millrace_job].[due_at] ASC, 1 ASC"  # 1: the selected seq
    assert "[millrace_job].[due_at] <= %s" in sql
    assert NOW in params


def test_consuming_a_bookmark_locks_only_the_oldest_and_skips_one_being_consumed(
    alias: str, vendor: Vendor
) -> None:
    sql, params = compiled(
        queries.oldest_bookmark(Bookmark.objects.using(alias), vendor, "paid", "order-9"), alias
    )

    assert f"FROM [millrace_bookmark] {READPAST}" in sql
    assert top(sql) == 1
    # mssql-django stores a uuid as char(32) lowercase hex: its own order is byte order.
    assert order_by(sql) == "[millrace_bookmark].[created_at] ASC, [millrace_bookmark].[id] ASC"
    assert {"paid", "order-9"} <= set(params)


def test_uniqueidentifier_ids_would_tie_break_on_their_canonical_text(alias: str) -> None:
    native = SQLServer(uuid_column="uniqueidentifier")
    sql, _ = compiled(
        queries.oldest_bookmark(Bookmark.objects.using(alias), native, "paid", "order-9"), alias
    )

    assert order_by(sql) == (
        "[millrace_bookmark].[created_at] ASC, "
        "CAST([millrace_bookmark].[id] AS nvarchar(36)) COLLATE Latin1_General_100_BIN2 ASC"
    )
    assert "binary(16)" not in sql.lower(), "binary keeps the mixed-endian layout"


def test_a_monitoring_keyset_compares_ids_the_way_it_orders_them(alias: str) -> None:
    native = SQLServer(uuid_column="uniqueidentifier")
    rows = WorkflowInstance.objects.using(alias).all()
    sql, params = compiled(queries.newest_first(rows, native, "id", (NOW, JOB_ID), 51), alias)

    text = "CAST([millrace_workflow_instance].[id] AS nvarchar(36)) COLLATE Latin1_General_100_BIN2"
    assert f"{text} < (%s COLLATE Latin1_General_100_BIN2)" in sql
    assert str(JOB_ID).upper() in params, "the bound is the canonical text the cast produces"
    assert order_by(sql) == f"[millrace_workflow_instance].[created_at] DESC, {text} DESC"
    assert top(sql) == 51
    assert NOW in params


def test_the_schema_has_the_filtered_indexes_the_hot_paths_need(alias: str) -> None:
    with connections[alias].schema_editor(collect_sql=True, atomic=False) as editor:
        editor.create_model(Job)
    ddl = "\n".join(editor.collected_sql)

    assert "([limited], [queue], [priority] DESC, [seq]) WHERE [state] = 1" in ddl
    assert "([lease_until]) WHERE [state] = 2" in ddl
    assert "([due_at], [seq]) WHERE [state] IN (0, 4)" in ddl
    assert "([parent_id]) WHERE [state] = 7" in ddl
    assert "UNIQUE INDEX [millrace_job_active_key] ON [millrace_job] ([key_scope]) " in ddl
    assert "WHERE [key_scope] IS NOT NULL" in ddl
    assert "[queue] nvarchar(200)  COLLATE Latin1_General_100_BIN2" in ddl


class FakeDriverConnection:
    timeout = 0


class FakeConnection:
    """Just enough of a Django connection for the vendor's timeout code."""

    def __init__(self) -> None:
        self.connection = FakeDriverConnection()
        self.executed: list[str] = []

    def ensure_connection(self) -> None:
        pass

    def cursor(self) -> Any:
        connection = self

        class Cursor:
            def __enter__(self) -> Cursor:
                return self

            def __exit__(self, *exc: object) -> None:
                pass

            def execute(self, sql: str, params: Any = None) -> None:
                connection.executed.append(sql)

        return Cursor()


def test_statements_are_bounded_by_the_drivers_query_timeout_for_the_call_only() -> None:
    connection = FakeConnection()

    with SQLServer().statement_timeout(connection, timedelta(seconds=2.5)):  # type: ignore[arg-type]
        assert connection.connection.timeout == 3
    assert connection.connection.timeout == 0


def test_lock_waits_are_bounded_when_a_storage_transaction_begins() -> None:
    connection = FakeConnection()

    SQLServer().begin(connection, timedelta(seconds=2.5))  # type: ignore[arg-type]

    assert connection.executed == ["SET LOCK_TIMEOUT 2500"]


def test_monitoring_pages_read_the_monitor_index_in_order_with_mssql_djangos_uuids(
    alias: str, vendor: Vendor
) -> None:
    rows = Job.objects.using(alias).all()
    sql, _ = compiled(queries.newest_first(rows, vendor, "uuid", (NOW, JOB_ID), 51), alias)

    assert "[millrace_job].[uuid] < %s" in sql
    assert order_by(sql) == "[millrace_job].[created_at] DESC, [millrace_job].[uuid] DESC"


def test_a_claim_leaves_out_paused_queues_in_the_same_statement(alias: str) -> None:
    jobs = Job.objects.using(alias)
    for queryset in (
        queries.claim_candidates(jobs, {"emails"}, NOW, 5),
        queries.expired_candidates(jobs, {"emails"}, NOW, 5),
    ):
        sql, _ = compiled(queryset, alias)
        assert "WHERE (NOT EXISTS(SELECT TOP 1" in sql and "FROM [millrace_paused_queue]" in sql
        assert "[millrace_paused_queue] WITH" not in sql, "the pause rows are never locked"


def test_the_expiry_sweep_reads_unstarted_jobs_past_their_deadline_by_the_clock_skipping_locked(
    alias: str,
) -> None:
    sql, params = compiled(queries.expiring(Job.objects.using(alias), NOW, 40), alias)

    assert f"FROM [millrace_job] {READPAST}" in sql
    assert top(sql) == 40
    assert "[millrace_job].[expires_at] <= %s" in sql and NOW in params
    assert order_by(sql) == "[millrace_job].[expires_at] ASC, [millrace_job].[seq] ASC"


def test_a_recurring_fire_tests_the_previous_job_in_its_compare_and_set_update(
    alias: str,
) -> None:
    jobs = Job.objects.using(alias)
    definition = Recurring.objects.using(alias).filter(id="sync", next_fire_time=NOW)
    sql, params = compiled_update(
        definition.filter(queries.may_fire(jobs)),
        {"next_fire_time": NOW + timedelta(days=1), "last_fire_time": NOW, "fired_job_id": JOB_ID},
        alias,
    )

    assert "UPDATE [millrace_recurring] SET" in sql
    assert "[millrace_recurring].[next_fire_time] = %s" in sql and NOW in params
    assert "[millrace_recurring].[overlap] = %s OR NOT EXISTS(SELECT TOP 1" in sql
    assert "[U0].[uuid] = ([millrace_recurring].[fired_job_id])" in sql
    assert "allow" in params


def test_the_due_read_leaves_out_definitions_held_by_overlap_queue(alias: str) -> None:
    held = queries.held(Job.objects.using(alias))
    due = Recurring.objects.using(alias).filter(~held, next_fire_time__lte=NOW)[:10]

    sql, params = compiled(due, alias)

    assert "[millrace_recurring].[next_fire_time] <= %s" in sql and NOW in params
    assert "NOT ([millrace_recurring].[overlap] = %s AND CASE WHEN EXISTS(SELECT TOP 1" in sql
    assert "[U0].[uuid] = ([millrace_recurring].[fired_job_id])" in sql and "queue" in params
    assert top(sql) == 10


def test_the_next_due_time_reads_the_head_of_each_index_range_against_the_clocks_instant(
    alias: str,
) -> None:
    assert connections[alias].features.supports_partial_indexes  # the due index is filtered
    jobs, recurring = Job.objects.using(alias), Recurring.objects.using(alias)
    (jobs_sql, jobs_params), (recurring_sql, recurring_params) = (
        compiled(head, alias)
        for head in queries.due_heads(jobs, recurring, NOW, partial_indexes=True)
    )

    assert jobs_sql.startswith("SELECT TOP 1 [millrace_job].[due_at]")
    assert "[millrace_job].[state] IN (%s, %s)" in jobs_sql  # the filtered index's condition
    assert "[millrace_job].[due_at] > %s" in jobs_sql
    assert order_by(jobs_sql) == "1 ASC"  # 1: the selected due_at
    assert set(jobs_params) == {Code.SCHEDULED, Code.FAILED, NOW}
    assert recurring_sql.startswith("SELECT TOP 1 [millrace_recurring].[next_fire_time]")
    assert "[millrace_recurring].[next_fire_time] > %s" in recurring_sql
    assert "[millrace_recurring].[enabled] = %s" in recurring_sql  # a disabled one never fires
    assert order_by(recurring_sql) == "1 ASC"  # 1: the selected next_fire_time
    assert recurring_params == (True, NOW)
    for sql in (jobs_sql, recurring_sql):
        assert "LOCK" not in sql and "READPAST" not in sql, "a plain read takes no locks"


def test_the_catalog_counts_unfinished_jobs_per_state_and_reads_one_newest_error_row(
    alias: str, vendor: Vendor
) -> None:
    jobs, tallies = Job.objects.using(alias), Tally.objects.using(alias)
    counts, _ = compiled(catalog.unfinished_counts(jobs, Q(target="shop:send")), alias)
    summed, _ = compiled(catalog.finished_counts(tallies, Q()), alias)
    head, _ = compiled(catalog.newest(jobs.filter(state=Code.DEAD, queue="q"), vendor), alias)

    assert counts.count("UNION ALL") == len(ACTIVE_JOB_STATES) - 1
    assert "GROUP BY [millrace_job].[target], [millrace_job].[state]" in counts
    assert "SUM([millrace_tally].[n])" in summed and "[millrace_job]" not in summed
    assert top(head) == 1
    # Ordered by the selected created_at and uuid (positions 1 and 2), newest first.
    assert head.startswith(
        "SELECT TOP 1 [millrace_job].[created_at] AS [created_at], [millrace_job].[uuid]"
    )
    assert order_by(head) == "1 DESC, 2 DESC"
