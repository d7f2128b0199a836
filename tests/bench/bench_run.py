"""A bench script run as the smoke tests run it: a subprocess from the repository's root,
against the test PostgreSQL (skipped without one, except in CI, where that fails)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def run_bench(arguments: list[str], timeout: float) -> str:
    """The standard output of ``python <arguments>``; fails with the tail of its output if
    it exits non-zero."""
    if not os.environ.get("MILLRACE_TEST_POSTGRES_URL"):
        if os.environ.get("CI"):
            pytest.fail("MILLRACE_TEST_POSTGRES_URL is not set (CI must run against it)")
        pytest.skip("MILLRACE_TEST_POSTGRES_URL is not set (scripts/testdb.sh starts one)")
    command = [sys.executable, *arguments]
    run = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=timeout)
    assert run.returncode == 0, run.stdout[-2_000:] + run.stderr[-3_000:]
    return run.stdout
