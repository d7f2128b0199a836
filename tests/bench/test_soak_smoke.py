"""The soak benchmark (bench/soak.py) at a tiny size, as a subprocess against the test
PostgreSQL: it must run its phases and print its table. The verdict is not checked: a
run of seconds need not pass it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
WINDOWS = 3


@pytest.mark.postgres
def test_a_tiny_soak_prints_a_row_per_window_with_throughput_and_sizes() -> None:
    if not os.environ.get("MILLRACE_TEST_POSTGRES_URL"):
        if os.environ.get("CI"):
            pytest.fail("MILLRACE_TEST_POSTGRES_URL is not set (CI must run against it)")
        pytest.skip("MILLRACE_TEST_POSTGRES_URL is not set (scripts/testdb.sh starts one)")
    command = [sys.executable, "bench/soak.py", "--minutes", "0.3", "--window", "0.1"]
    command += ["--measure-jobs", "1000", "--retention", "5", "--processes", "1"]
    command += ["--producers", "1"]
    run = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout[-2_000:] + run.stderr[-3_000:]
    assert "fsync=" in run.stdout and "drain rate measured" in run.stdout
    header = next(line for line in run.stdout.splitlines() if line.startswith("| window |"))
    columns = [cell.strip() for cell in header.strip("|").split("|")]
    rows = [
        dict(zip(columns, (cell.strip() for cell in line.strip("|").split("|")), strict=True))
        for line in run.stdout.splitlines()
        if re.match(r"\| \d+ \|", line)
    ]
    assert [row["window"] for row in rows] == [str(n) for n in range(1, WINDOWS + 1)]
    assert {"jobs/s", "pickup p99 ms", "job heap MB", "job indexes MB", "WAL MB"} <= set(columns)
    assert any(float(row["jobs/s"].replace(",", "")) > 0 for row in rows), run.stdout
    assert "verdict:" in run.stdout
