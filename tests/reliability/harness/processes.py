"""Real ``manage.py`` processes, each in a session of its own, and bounded waits.

Shared by the integration tests and the reliability harness: every wait polls with a
deadline, and every process started can be killed with whatever it forked.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from contextlib import suppress
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[3]
POLL_SECONDS = 0.05


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

    def running(self) -> bool:
        return self.process.poll() is None

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
        for member in session_members(self.pid):
            with suppress(ProcessLookupError):
                os.kill(member, signal.SIGKILL)

    def __str__(self) -> str:
        return f"manage.py {' '.join(self.args)} (pid {self.pid})"


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


def _is_zombie(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return status.rpartition(")")[2].split()[0] == "Z"
