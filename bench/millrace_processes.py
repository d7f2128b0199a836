"""Processes of this repository's code on a bench database: ``manage.py millrace_worker``
and the benchmarks' own Django scripts, with the minimal project ``peers.django_settings``
(read from the environment built here)."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent


def environment(database_url: str, millrace: Mapping[str, Any]) -> dict[str, str]:
    """The variables a process of the bench needs on top of this one's: Django settings
    on ``database_url`` with ``MILLRACE`` set to ``millrace``, and ``bench`` and the
    repository importable (so workers find the benchmarks' jobs)."""
    return {
        "DJANGO_SETTINGS_MODULE": "peers.django_settings",
        "PEER_SYSTEM": "millrace",
        "PEER_DB_URL": database_url,
        "PEER_MILLRACE": json.dumps(dict(millrace)),
        "PYTHONPATH": os.pathsep.join([str(REPO / "bench"), str(REPO)]),
    }


def worker_command(processes: int, *, scheduler: bool = True) -> list[str]:
    """``manage.py millrace_worker --processes N`` run by this interpreter."""
    command = [sys.executable, "-m", "django", "millrace_worker", f"--processes={processes}"]
    return command + ([] if scheduler else ["--no-scheduler"]) + ["--verbosity=0"]
