"""Real ``manage.py`` processes for the integration tests and the ledger they write
(the processes and bounded waits themselves live in the reliability harness)."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import UUID

from tests.integration.ledger_jobs import LEDGER_VARIABLE
from tests.reliability.harness.processes import ManagePy, session_members, wait_until
from tests.reliability.harness.scale import FAST

__all__ = ["FAST", "Entry", "Ledger", "ManagePy", "Processes", "session_members", "wait_until"]


@dataclass(frozen=True, slots=True)
class Entry:
    event: str
    job_id: UUID
    attempt: int
    pid: int
    at: float


class Ledger:
    """The append-only file the ledger jobs write."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.touch()

    def entries(self, event: str | None = None) -> list[Entry]:
        found = []
        for line in self.path.read_text().splitlines():
            name, job_id, attempt, pid, at = line.split()
            if event is None or name == event:
                found.append(Entry(name, UUID(job_id), int(attempt), int(pid), float(at)))
        return found


class Processes:
    """Starts processes against the test database and kills whatever is left after."""

    def __init__(self, database_url: str, ledger: Ledger, logs: Path) -> None:
        self.ledger = ledger
        self._logs = logs
        self._started: list[ManagePy] = []
        self._database_url = database_url

    def environment(self, overrides: Mapping[str, Any]) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("MILLRACE_TEST_")}
        env.update(
            DJANGO_SETTINGS_MODULE="tests.integration.worker_settings",
            MILLRACE_INTEGRATION_DATABASE_URL=self._database_url,
            MILLRACE_INTEGRATION_SETTINGS=json.dumps({**FAST, **overrides}),
            PYTHONUNBUFFERED="1",
        )
        env[LEDGER_VARIABLE] = str(self.ledger.path)
        return env

    def start(self, *args: str, settings: Mapping[str, Any] | None = None) -> ManagePy:
        name = f"{len(self._started)}-{args[0]}.log"
        process = ManagePy(list(args), self.environment(settings or {}), self._logs / name)
        self._started.append(process)
        return process

    def close(self) -> None:
        for process in self._started:
            process.stop_hard()
