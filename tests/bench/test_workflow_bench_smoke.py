"""The workflow benchmark (bench/workflow_bench.py) at its quick size, as a subprocess
against the test PostgreSQL, with Millrace alone in its peer run: DBOS is left out, so
nothing is installed and no network is needed. Rates are not checked (a shared CI
machine decides them); that every instance completed is, being a count."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.bench.bench_run import run_bench

WORKLOADS = {
    "linear": "linear, 3 steps",
    "fan_out": "fan-out of 10",
    "signal": "signal round trip, 1 step",
    "signal_batched": "signal round trip, 100 per call",
}
SIZE_OF = {"signal_batched": "signal"}
"""The batched signal workload runs as many instances as the one-per-call one."""


@pytest.mark.postgres
def test_the_quick_workflow_bench_completes_every_instance_of_every_workload(
    tmp_path: Path,
) -> None:
    output = tmp_path / "workflows.json"
    command = ["bench/workflow_bench.py", "--quick", "--systems", "millrace"]
    stdout = run_bench([*command, "--json", str(output)], timeout=240)
    figures = json.loads(output.read_text())
    [row] = figures["plain_vs_workflow"]
    assert row["completed"] == row["instances"] and not row["workflow_capped"], row
    peers = figures["peers"]
    assert set(peers["systems"]) == {"millrace"} and not peers["systems"]["millrace"]["error"]
    runs = {r["figure"]: r for r in peers["runs"]}
    assert set(runs) == set(WORKLOADS) and len(peers["runs"]) == len(WORKLOADS), peers["runs"]
    for workload, measured in runs.items():
        value = measured["value"]
        assert measured["error"] is None and value is not None, (workload, measured)
        expected = peers["sizes"][SIZE_OF.get(workload, workload)]
        assert value["done"] == value["instances"] == expected, (workload, value)
        assert not value["capped"] and value["rate"] > 0, (workload, value)
    rows = [line for line in stdout.splitlines() if line.startswith("| ")]
    for title in WORKLOADS.values():
        assert any(line.startswith(f"| {title}") and "| Millrace |" in line for line in rows)
