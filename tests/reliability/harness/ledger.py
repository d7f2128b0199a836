"""The execution ledger: what really ran, kept outside the database.

Every process appends to a file of its own (``<pid>.ledger`` in the directory named by
``MILLRACE_LEDGER_DIR``), one line per event, flushed as it is written, so a SIGKILL
loses at most the line being written. A line is::

    <event> <job id or -> <attempt> <pid> <monotonic seconds> <wall seconds>

Job code writes ``start`` and ``finish``; the supervisor (in the test process) writes
``spawn``, ``kill``, ``stop``, ``continue`` and ``exit`` about the process ``pid``.
Monotonic time is the machine's, shared by every process, so intervals from different
processes compare directly.
"""

from __future__ import annotations

import os
import threading
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from uuid import UUID

LEDGER_DIR_VARIABLE = "MILLRACE_LEDGER_DIR"

_lock = threading.Lock()
_descriptors: dict[Path, int] = {}
"""Open ledger files by path (the pid is in the name, so a forked child opens its own)."""


def append(
    event: str,
    job_id: UUID | None,
    attempt: int,
    pid: int | None = None,
    directory: Path | None = None,
) -> None:
    """Append one event line to this process's ledger file (one ``O_APPEND`` write) in
    ``directory``, by default the one ``MILLRACE_LEDGER_DIR`` names."""
    line = (
        f"{event} {job_id or '-'} {attempt} {pid or os.getpid()} "
        f"{time.monotonic():.6f} {time.time():.6f}\n"
    )
    folder = directory or Path(os.environ[LEDGER_DIR_VARIABLE])
    path = folder / f"{os.getpid()}.ledger"
    with _lock:
        descriptor = _descriptors.get(path)
        if descriptor is None:
            descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            _descriptors[path] = descriptor
        os.write(descriptor, line.encode())


@dataclass(frozen=True, slots=True)
class Event:
    event: str
    job_id: UUID | None
    attempt: int
    pid: int
    monotonic: float
    wall: float

    def __str__(self) -> str:
        subject = f"job {self.job_id} attempt {self.attempt}" if self.job_id else "process"
        return f"{self.monotonic:.3f} {self.event} {subject} pid {self.pid}"


@dataclass(frozen=True, slots=True)
class Execution:
    """One run of a job function: from its ``start`` to its ``finish``, or to the end
    of its process (killed, or exited) when it never finished."""

    job_id: UUID
    attempt: int
    pid: int
    started: float
    started_wall: float
    """The start by the wall clock, which compares with the journal's database times."""
    finished: float | None
    ended: float | None
    """``finished``, or when its process was seen to die; ``None``: unknown (runs on)."""

    def overlaps(self, other: Execution) -> bool:
        end = float("inf") if self.ended is None else self.ended
        other_end = float("inf") if other.ended is None else other.ended
        return self.started < other_end and other.started < end

    def __str__(self) -> str:
        end = "never finished" if self.finished is None else f"finished {self.finished:.3f}"
        return f"attempt {self.attempt} in pid {self.pid}: started {self.started:.3f}, {end}"


class Ledger:
    """Reads every ledger file in a directory."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)

    def events(self, event: str | None = None) -> list[Event]:
        """All events (of one kind), in monotonic order."""
        found = []
        for path in self.directory.glob("*.ledger"):
            for line in path.read_text().splitlines():
                parts = line.split()
                if len(parts) != 6:
                    continue  # a line torn by a SIGKILL mid-write
                name, job, attempt, pid, monotonic, wall = parts
                if event is None or name == event:
                    found.append(
                        Event(
                            name,
                            None if job == "-" else UUID(job),
                            int(attempt),
                            int(pid),
                            float(monotonic),
                            float(wall),
                        )
                    )
        return sorted(found, key=lambda e: e.monotonic)

    def executions(self) -> dict[UUID, list[Execution]]:
        """Each job's executions, in the order they started."""
        deaths: dict[int, float] = {}
        for death in self.events():
            if death.event in ("kill", "exit") and death.pid not in deaths:
                deaths[death.pid] = death.monotonic
        finishes = {(e.job_id, e.attempt, e.pid): e.monotonic for e in self.events("finish")}
        found: dict[UUID, list[Execution]] = defaultdict(list)
        for start in self.events("start"):
            assert start.job_id is not None
            finished = finishes.get((start.job_id, start.attempt, start.pid))
            found[start.job_id].append(
                Execution(
                    job_id=start.job_id,
                    attempt=start.attempt,
                    pid=start.pid,
                    started=start.monotonic,
                    started_wall=start.wall,
                    finished=finished,
                    ended=finished if finished is not None else deaths.get(start.pid),
                )
            )
        return dict(found)

    def started_jobs(self) -> set[UUID]:
        return {e.job_id for e in self.events("start") if e.job_id is not None}

    def finished(self) -> list[Event]:
        return self.events("finish")
