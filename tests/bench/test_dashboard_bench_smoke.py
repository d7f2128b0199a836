"""The dashboard benchmark (bench/dashboard_bench.py) at its smallest size, as a subprocess
against the test PostgreSQL: it must request every page and print its summary table.
Times are not checked (a shared CI machine decides them); rows read are, being counts:
at 20,000 jobs no plan node may read beyond the page plus the active rows either."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
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
    if not os.environ.get("MILLRACE_TEST_POSTGRES_URL"):
        if os.environ.get("CI"):
            pytest.fail("MILLRACE_TEST_POSTGRES_URL is not set (CI must run against it)")
        pytest.skip("MILLRACE_TEST_POSTGRES_URL is not set (scripts/testdb.sh starts one)")
    command = [sys.executable, "bench/dashboard_bench.py", "--jobs", "20000", "--runs", "1"]
    run = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=60)
    assert run.returncode == 0, run.stdout[-2_000:] + run.stderr[-3_000:]
    lines = run.stdout.splitlines()
    header = next(line for line in lines if line.startswith("| page |"))
    columns = [cell.strip() for cell in header.strip("|").split("|")]
    rows = [
        dict(zip(columns, (cell.strip() for cell in line.strip("|").split("|")), strict=True))
        for line in lines[lines.index(header) + 2 :]
        if line.startswith("| ")
    ]
    assert {row["page"] for row in rows} >= PAGES, run.stdout
    assert {row["rows"] for row in rows} == {"ok"}, run.stdout
    assert all(float(row["median ms"]) > 0 and int(row["statements"]) > 0 for row in rows)
    assert any(line.startswith("load average") for line in lines)
    assert any(line.startswith("verdict:") for line in lines)
