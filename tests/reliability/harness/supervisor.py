"""A supervisor for real ``manage.py`` processes: restarts those that die, within a
budget, and writes what it did to the ledger.

Each slot is one long-lived role (``worker-1``, ``scheduler-2``…) whose process is
restarted whenever it exits without the test asking it to (``retire`` first, then
signal). Restarts are bounded: past ``max_restarts`` the slot stays down and
:meth:`Supervisor.check` fails. Kills, stops and exits are ledger events, so an
execution that never finished ends when its process died.
"""

from __future__ import annotations

import json
import os
import signal
import threading
from collections.abc import Mapping
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.reliability.harness.ledger import LEDGER_DIR_VARIABLE, append
from tests.reliability.harness.processes import POLL_SECONDS, ManagePy, wait_until
from tests.reliability.harness.scale import FAST

SETTINGS_MODULE = "tests.reliability.harness.settings"
WORKER_STARTED = "started: queues"
"""What a worker logs once it is claiming."""
SCHEDULER_STARTED = "scheduler started"
STARTED = {"millrace_worker": WORKER_STARTED, "millrace_scheduler": SCHEDULER_STARTED}
"""What each command logs once it runs (other commands are not waited for)."""
_EVENTS = {signal.SIGKILL: "kill", signal.SIGSTOP: "stop", signal.SIGCONT: "continue"}


def process_environment(
    database_url: str,
    ledger_dir: Path,
    settings: Mapping[str, Any] | None = None,
    database: Mapping[str, Any] | None = None,
) -> dict[str, str]:
    """The environment of a harness process: :mod:`.settings` on ``database_url`` with
    :data:`~.scale.FAST` timings updated by ``settings`` (``MILLRACE`` keys) and the
    database entry updated by ``database``; jobs write the ledger in ``ledger_dir``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MILLRACE_TEST_")}
    env.update(
        {
            "DJANGO_SETTINGS_MODULE": SETTINGS_MODULE,
            "MILLRACE_RELIABILITY_DATABASE_URL": database_url,
            "MILLRACE_RELIABILITY_SETTINGS": json.dumps({**FAST, **(settings or {})}),
            "MILLRACE_RELIABILITY_DATABASE": json.dumps(dict(database or {})),
            LEDGER_DIR_VARIABLE: str(ledger_dir),
            "PYTHONUNBUFFERED": "1",
        }
    )
    return env


@dataclass(slots=True)
class Slot:
    """One role and its current process (``history`` holds every incarnation)."""

    name: str
    args: list[str]
    history: list[ManagePy] = field(default_factory=list)
    retired: bool = False

    @property
    def process(self) -> ManagePy:
        return self.history[-1]


class Supervisor:
    """Starts processes in slots and restarts them when they die (a polling thread)."""

    def __init__(
        self, environment: Mapping[str, str], logs: Path, *, max_restarts: int = 20
    ) -> None:
        self.environment = dict(environment)
        self.max_restarts = max_restarts
        self.restarts = 0
        self._logs = logs
        self._ledger = Path(self.environment[LEDGER_DIR_VARIABLE])
        self._slots: dict[str, Slot] = {}
        self._given_up: list[str] = []
        self._exited: set[int] = set()
        self._lock = threading.RLock()
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="supervisor", daemon=True)
        self._thread.start()

    # -- starting -------------------------------------------------------------------------

    def start(self, name: str, *args: str) -> Slot:
        """Start ``manage.py <args>`` in a new slot ``name``."""
        with self._lock:
            if name in self._slots:
                raise ValueError(f"slot {name!r} exists")
            slot = Slot(name, list(args))
            self._spawn(slot)
            self._slots[name] = slot
            return slot

    def worker(self, name: str, *args: str) -> Slot:
        """A ``millrace_worker --no-scheduler`` slot (extra ``args`` appended)."""
        return self.start(name, "millrace_worker", "--no-scheduler", *args)

    def scheduler(self, name: str) -> Slot:
        return self.start(name, "millrace_scheduler")

    def slot(self, name: str) -> Slot:
        return self._slots[name]

    def slots(self) -> list[Slot]:
        with self._lock:
            return list(self._slots.values())

    def wait_started(self, name: str, timeout: float = 30.0) -> ManagePy:
        """Wait until the current process of ``name`` logs that it runs; returns it."""
        slot = self._slots[name]
        process = slot.process
        for command, marker in STARTED.items():
            if command in slot.args:
                process.wait_for_log(marker, timeout)
        return process

    # -- signals --------------------------------------------------------------------------

    def send(self, name: str, number: signal.Signals) -> ManagePy:
        """Send ``number`` to the current process of ``name`` (recorded in the ledger
        when it kills, stops or continues); it is restarted if it dies, unless retired."""
        with self._lock:
            process = self._slots[name].process
            event = _EVENTS.get(number)
            if event is not None:
                append(event, None, 0, process.pid, self._ledger)
            with suppress(ProcessLookupError):
                os.kill(process.pid, number)
            return process

    def kill(self, name: str, timeout: float = 30.0) -> ManagePy:
        """SIGKILL the current process of ``name`` and wait until its replacement is
        spawned, so that the next signal to ``name`` reaches a live process; returns the
        killed one. (A kill sent to a process already dead and not yet replaced would
        reach nothing, and the restart it expects would never come.)"""
        with self._lock:
            slot = self._slots[name]
            if slot.retired or not slot.process.running():
                raise AssertionError(f"{slot.process} is retired or has already exited")
            victim = self.send(name, signal.SIGKILL)

        def replaced() -> bool:
            return slot.process is not victim or name in self._given_up

        wait_until(replaced, timeout, f"{victim} replaced")
        self.check()  # the restart budget was spent: say so, with the logs
        return victim

    def retire(self, name: str) -> ManagePy:
        """No more restarts for ``name``; returns its current process."""
        with self._lock:
            slot = self._slots[name]
            slot.retired = True
            return slot.process

    def stop(self, name: str, number: signal.Signals = signal.SIGTERM) -> ManagePy:
        """Retire ``name`` and send its process ``number``."""
        self.retire(name)
        return self.send(name, number)

    # -- checking and closing -------------------------------------------------------------

    def check(self) -> None:
        """Fail if any slot used up the restart budget (with the last logs)."""
        with self._lock:
            if self._given_up:
                logs = "\n".join(
                    f"--- {self._slots[n].process}\n{self._slots[n].process.log()[-3000:]}"
                    for n in self._given_up
                )
                raise AssertionError(
                    f"restart budget of {self.max_restarts} spent; slots left down: "
                    f"{', '.join(self._given_up)}\n{logs}"
                )

    def close(self) -> None:
        """Stop watching and SIGKILL every process still running (SIGCONT first, in
        case one is stopped)."""
        self._closed.set()
        self._thread.join(10)
        with self._lock:
            for slot in self._slots.values():
                for process in slot.history:
                    if process.running():
                        with suppress(ProcessLookupError):
                            os.kill(process.pid, signal.SIGCONT)
                    process.stop_hard()

    def logs(self) -> str:
        """Every process's log, for a failure message."""
        with self._lock:
            return "\n".join(
                f"--- {process}\n{process.log()}"
                for slot in self._slots.values()
                for process in slot.history
            )

    # -- the watch ------------------------------------------------------------------------

    def _spawn(self, slot: Slot) -> None:
        log = self._logs / f"{slot.name}-{len(slot.history)}.log"
        process = ManagePy(slot.args, self.environment, log)
        append("spawn", None, 0, process.pid, self._ledger)
        slot.history.append(process)

    def _watch(self) -> None:
        while not self._closed.wait(POLL_SECONDS):
            with self._lock:
                for slot in self._slots.values():
                    self._look_after(slot)

    def _look_after(self, slot: Slot) -> None:
        process = slot.process
        code = process.process.poll()
        if code is None or process.pid in self._exited:
            return
        append("exit", None, code, process.pid, self._ledger)
        self._exited.add(process.pid)
        if slot.retired or slot.name in self._given_up:
            return
        if self.restarts >= self.max_restarts:
            self._given_up.append(slot.name)
            return
        self.restarts += 1
        self._spawn(slot)


def wait_for_exit(process: ManagePy, timeout: float) -> int:
    """The exit code of ``process`` once it has exited (bounded)."""
    wait_until(lambda: not process.running(), timeout, f"the exit of {process}")
    return process.exit_code(1)
