"""``python -m workflow_peers SYSTEM COMMAND ...``: a measurement (see ``harness.main``)
or, with ``worker``, one worker process of SYSTEM (the drivers' own entry points)."""

from __future__ import annotations

import sys
from importlib import import_module

from workflow_peers import harness


def run() -> None:
    if len(sys.argv) < 3:
        sys.exit("usage: python -m workflow_peers SYSTEM (describe|prepare|measure|worker) ...")
    system, command = sys.argv[1], sys.argv[2]
    driver = import_module(f"workflow_peers.{system}")
    if command == "worker":
        driver.run_worker()
    else:
        harness.main(driver.make_peer(), sys.argv[2:])


run()
