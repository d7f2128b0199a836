"""The dashboard benchmark (bench/dashboard_bench.py) at its smallest size, as a subprocess
against the test PostgreSQL: it must request every page and print its summary table.
Times are not checked (a shared CI machine decides them); rows read are, being counts:
at 20,000 jobs no plan node may read beyond the page plus the active rows either."""

from __future__ import annotations

import pytest

from tests.bench.bench_run import run_bench

PAGES = {
    "overview",
    "overview, tenant",
    "jobs",
    "jobs, page 2",
    "jobs, processing",
    "jobs, target prefix",
    "jobs, created range",
    "job detail",
    "queues",
    "recurring",
    "instances, running",
    "instance detail",
    "metrics",
    "API statistics",
    "API jobs, target + state",
    "API queues",
    "API recurring",
    "API instances",
}
"""A sample of the labels: every kind of page, list filter and endpoint."""


@pytest.mark.postgres
def test_the_smallest_dashboard_bench_prints_a_row_per_page_within_its_row_bound() -> None:
    stdout = run_bench(["bench/dashboard_bench.py", "--jobs", "20000", "--runs", "1"], timeout=60)
    lines = stdout.splitlines()
    header = next(line for line in lines if line.startswith("| page |"))
    columns = [cell.strip() for cell in header.strip("|").split("|")]
    rows = [
        dict(zip(columns, (cell.strip() for cell in line.strip("|").split("|")), strict=True))
        for line in lines[lines.index(header) + 2 :]
        if line.startswith("| ")
    ]
    assert {row["page"] for row in rows} >= PAGES, stdout
    assert {row["rows"] for row in rows} == {"ok"}, stdout
    assert all(float(row["median ms"]) > 0 and int(row["statements"]) > 0 for row in rows)
    assert any(line.startswith("load average") for line in lines)
    assert any(line.startswith("verdict:") for line in lines)
