"""``python -m peers SYSTEM COMMAND ...``: a measurement (see ``harness.main``) or, with
``worker CONFIG``, one worker process of SYSTEM (the drivers' own worker entry points)."""

from __future__ import annotations

import sys
from importlib import import_module

from peers import harness


def run() -> None:
    if len(sys.argv) < 3:
        sys.exit(
            "usage: python -m peers SYSTEM (describe|prepare|enqueue|session|recurring|worker) ..."
        )
    system, command = sys.argv[1], sys.argv[2]
    driver = import_module(f"peers.{system}")
    if command == "worker":
        driver.run_worker(*sys.argv[3:])
    else:
        harness.main(driver.make_peer(), sys.argv[2:])


run()
