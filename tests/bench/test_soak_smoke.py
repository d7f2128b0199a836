"""The soak benchmark (bench/soak.py) at a tiny size, as a subprocess against the test
PostgreSQL: it must run its phases and print its table. The verdict is not checked: a
run of seconds need not pass it."""

from __future__ import annotations

import re

import pytest

from tests.bench.bench_run import run_bench

WINDOWS = 3


@pytest.mark.postgres
def test_a_tiny_soak_prints_a_row_per_window_with_throughput_and_sizes() -> None:
    command = ["bench/soak.py", "--minutes", "0.3", "--window", "0.1"]
    command += ["--measure-jobs", "1000", "--retention", "5", "--processes", "1"]
    command += ["--producers", "1"]
    stdout = run_bench(command, timeout=120)
    assert "fsync=" in stdout and "drain rate measured" in stdout
    header = next(line for line in stdout.splitlines() if line.startswith("| window |"))
    columns = [cell.strip() for cell in header.strip("|").split("|")]
    rows = [
        dict(zip(columns, (cell.strip() for cell in line.strip("|").split("|")), strict=True))
        for line in stdout.splitlines()
        if re.match(r"\| \d+ \|", line)
    ]
    assert [row["window"] for row in rows] == [str(n) for n in range(1, WINDOWS + 1)]
    assert {"jobs/s", "pickup p99 ms", "job heap MB", "job indexes MB", "WAL MB"} <= set(columns)
    assert any(float(row["jobs/s"].replace(",", "")) > 0 for row in rows), stdout
    assert "verdict:" in stdout
