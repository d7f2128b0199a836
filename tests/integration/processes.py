"""Real ``manage.py`` processes for the integration tests, the ledger they write, and
bounded waits (every wait polls and has a deadline; none is an assertion by itself)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from uuid import UUID

from tests.integration.ledger_jobs import LEDGER_VARIABLE

REPO = Path(__file__).resolve().parents[2]
POLL_SECONDS = 0.05

FAST = {
    "QUEUES": ["default"],
    "CONCURRENCY": 4,
    "LEASE": 2,
    "HEARTBEAT": 0.5,
    "POLL_MIN": 0.05,
    "POLL_MAX": 0.2,
    "SCHEDULER_INTERVAL": 0.1,
    "SHUTDOWN_TIMEOUT": 10,
    "SHUTDOWN_GRACE": 1,
}
"""Short leases and fast polling, so recovery after a kill takes seconds."""


def wait_until(condition: Callable[[], Any], timeout: float, what: str) -> Any:
    """Poll ``condition`` until it returns something truthy (returned), or fail saying
    ``what`` did not happen within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"{what} did not happen within {timeout:g}s")
        time.sleep(POLL_SECONDS)


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


class ManagePy:
    """One ``manage.py`` process in a session of its own, its output in a file."""

    def __init__(self, args: list[str], env: Mapping[str, str], log: Path) -> None:
        self.args = args
        self.log_path = log
        with log.open("wb") as output:
            self.process = subprocess.Popen(
                [sys.executable, "manage.py", *args],
                cwd=REPO,
                env=dict(env),
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.pid = self.process.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def send(self, number: signal.Signals) -> None:
        self.process.send_signal(number)

    def wait_for_log(self, text: str, timeout: float = 30.0) -> None:
        wait_until(lambda: text in self.log(), timeout, f"{text!r} in the log of {self}")

    def exit_code(self, timeout: float) -> int:
        """Wait for the process to exit (failing with its log after ``timeout``)."""
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError(f"{self} still runs after {timeout:g}s:\n{self.log()}") from None

    def stop_hard(self) -> None:
        """SIGKILL the process and its children (its session), if still running."""
        if self.process.poll() is None:
            with suppress(ProcessLookupError):
                os.killpg(self.pid, signal.SIGKILL)
            self.process.wait(10)

    def __str__(self) -> str:
        return f"manage.py {' '.join(self.args)} (pid {self.pid})"


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
        for process in self._started:
            for child in session_members(process.pid):
                _kill(child)


def session_members(pid: int) -> list[int]:
    """Live processes in the session ``pid`` leads (it and the children of
    ``--processes``)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            member = int(entry.name)
            if os.getsid(member) == pid and not _is_zombie(member):
                found.append(member)
        except (ProcessLookupError, PermissionError):
            continue
    return found


def _kill(pid: int) -> None:
    with suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def _is_zombie(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return status.rpartition(")")[2].split()[0] == "Z"
