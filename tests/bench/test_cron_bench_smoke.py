"""The cron benchmark (bench/cron_bench.py) at its smallest, as a subprocess against the
test PostgreSQL: a worker starts, two forced fires start their jobs, the table prints."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.postgres
def test_two_forced_fires_print_their_lateness() -> None:
    if not os.environ.get("MILLRACE_TEST_POSTGRES_URL"):
        if os.environ.get("CI"):
            pytest.fail("MILLRACE_TEST_POSTGRES_URL is not set (CI must run against it)")
        pytest.skip("MILLRACE_TEST_POSTGRES_URL is not set (scripts/testdb.sh starts one)")
    command = [sys.executable, "bench/cron_bench.py", "--fires", "2", "--rounds", "1"]
    command += ["--configs", "default"]
    run = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=180)
    assert run.returncode == 0, run.stdout[-2_000:] + run.stderr[-3_000:]
    (row,) = [line for line in run.stdout.splitlines() if line.startswith("| default |")]
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    assert cells[1] == "2", run.stdout
    assert 0 <= float(cells[4]) <= float(cells[2]) <= float(cells[5]), run.stdout
