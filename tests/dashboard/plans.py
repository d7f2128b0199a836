"""How many rows a page's statements read, from PostgreSQL's own account of their plans.

Each SELECT a request ran is run again under ``EXPLAIN (ANALYZE, FORMAT JSON)``; a
statement reads what its scan nodes returned plus what they read and threw away (rows
removed by a filter or a recheck), times their loops. No timing: the figures are counts,
the same on a busy machine as on a quiet one. Used by the read-cost test and by
``bench/dashboard_bench.py``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from django.db import connections
from django.test.utils import CaptureQueriesContext

_SETTINGS = re.compile(r"^\s*(SET LOCAL [^;]*;\s*)*", re.IGNORECASE)
"""Settings the storage sends ahead of a read in the same message (its timeout)."""
_READ = ("Actual Rows", "Rows Removed by Filter", "Rows Removed by Index Recheck")


@dataclass(frozen=True, slots=True)
class StatementCost:
    """One statement: the rows its plan read, and the node that read the most."""

    sql: str
    rows_read: int
    widest_node: str
    widest_rows: int


def _nodes(plan: Mapping[str, Any]) -> Iterator[Mapping[str, Any]]:
    yield plan
    for child in plan.get("Plans", ()):
        yield from _nodes(child)


def _read_by(node: Mapping[str, Any]) -> int:
    """Rows a scan node read (0 for nodes that only combine their children's)."""
    if "Relation Name" not in node and "Index Name" not in node:
        return 0
    return int(sum(node.get(key, 0) for key in _READ) * node.get("Actual Loops", 1))


def _describe(node: Mapping[str, Any]) -> str:
    where = node.get("Index Name") or node.get("Relation Name") or ""
    return f"{node['Node Type']} {where}".strip()


def explain(alias: str, sql: str) -> StatementCost:
    """Run ``sql`` (a SELECT) under ``EXPLAIN ANALYZE`` on ``alias`` and count its reads."""
    with connections[alias].cursor() as cursor:
        cursor.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}")
        (document,) = cursor.fetchone()
    plan = (json.loads(document) if isinstance(document, str) else document)[0]["Plan"]
    reads = [(_read_by(node), _describe(node)) for node in _nodes(plan)]
    widest_rows, widest_node = max(reads, default=(0, ""))
    return StatementCost(sql, sum(n for n, _ in reads), widest_node, widest_rows)


def statement_costs(alias: str, request: Callable[[], object]) -> list[StatementCost]:
    """The cost of each SELECT that ``request()`` ran on ``alias``."""
    with CaptureQueriesContext(connections[alias]) as captured:
        request()
    statements = [_SETTINGS.sub("", q["sql"]) for q in captured.captured_queries]
    selects = [sql for sql in statements if sql.upper().startswith(("SELECT", "WITH", "(SELECT"))]
    return [explain(alias, sql) for sql in selects]
