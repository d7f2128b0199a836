"""The cron benchmark (bench/cron_bench.py) at its smallest, as a subprocess against the
test PostgreSQL: a worker starts, two forced fires start their jobs, the table prints."""

from __future__ import annotations

import pytest

from tests.bench.bench_run import run_bench


@pytest.mark.postgres
def test_two_forced_fires_print_their_lateness() -> None:
    arguments = ["--fires", "2", "--rounds", "1", "--configs", "default"]
    output = run_bench(["bench/cron_bench.py", *arguments], timeout=180)
    (row,) = [line for line in output.splitlines() if line.startswith("| default |")]
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    assert cells[1] == "2", output
    assert 0 <= float(cells[4]) <= float(cells[2]) <= float(cells[5]), output
