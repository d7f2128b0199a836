"""``millrace_worker --processes N``: N worker processes started and stopped together.

Each child is the same command with ``--processes 1``, in its own process group so a
terminal's Ctrl-C reaches it once, through the parent: the parent forwards every
SIGTERM/SIGINT it receives to every child that still runs (the first one drains, the
second releases). A child whose parent disappears stops on its own (graceful).
The scheduler runs in the first child only, unless ``--no-scheduler``.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import FrameType

from django.conf import settings

from millrace_django.runtime.shutdown import STOP_SIGNALS

logger = logging.getLogger(__name__)

POLL_SECONDS = 0.1
"""How often the parent looks at its children."""

PARENT_CHECK_SECONDS = 0.5
"""How often a child looks whether its parent is still there."""


@dataclass(frozen=True, slots=True)
class ChildExit:
    pid: int
    returncode: int
    clean: bool
    """Exited 0, or died of a stop signal the parent forwarded before the child could
    handle it (it was still starting: nothing to drain)."""


def child_command(arguments: Sequence[str]) -> list[str]:
    """How to start this project's ``manage.py``-equivalent with ``arguments``."""
    return [sys.executable, "-m", "django", *arguments]


def child_environment() -> dict[str, str]:
    """The parent's environment, plus the settings module and the directory of the
    running script on ``PYTHONPATH`` (where ``manage.py`` put the project)."""
    env = dict(os.environ)
    env["DJANGO_SETTINGS_MODULE"] = settings.SETTINGS_MODULE
    project_dir = os.path.abspath(sys.path[0] or os.getcwd())
    existing = env.get("PYTHONPATH")
    env["PYTHONPATH"] = project_dir + (os.pathsep + existing if existing else "")
    return env


def supervise(
    commands: Sequence[Sequence[str]], *, announce: Callable[[str], None]
) -> list[ChildExit]:
    """Run one child per command until all have exited; forward stop signals to them.

    A child that fails (exits non-zero) while no stop was asked for makes the parent stop
    the others. Returns how each child ended. Must run on the main thread.
    """
    env = child_environment()
    children: list[subprocess.Popen[bytes]] = []
    stopping = threading.Event()
    forwarded: set[int] = set()

    def forward(signum: int, frame: FrameType | None) -> None:
        stopping.set()
        forwarded.add(signum)
        for child in children:
            if child.poll() is None:
                child.send_signal(signum)

    previous = {number: signal.signal(number, forward) for number in STOP_SIGNALS}
    try:
        for command in commands:
            children.append(subprocess.Popen(list(command), env=env, process_group=0))
        announce(
            f"started {len(children)} worker processes: "
            + ", ".join(str(child.pid) for child in children)
        )
        exits = _wait(children, stopping)
        return [
            ChildExit(pid, code, code == 0 or (code < 0 and -code in forwarded))
            for pid, code in exits
        ]
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        for child in children:  # only if waiting itself failed
            if child.poll() is None:
                child.kill()
                child.wait()


def _wait(
    children: list[subprocess.Popen[bytes]], stopping: threading.Event
) -> list[tuple[int, int]]:
    """(pid, return code) of each child, once all have exited."""
    exits: dict[int, int] = {}
    while len(exits) < len(children):
        for child in children:
            if child.pid in exits:
                continue
            code = child.poll()
            if code is None:
                continue
            exits[child.pid] = code
            if code != 0 and not stopping.is_set():
                logger.error(
                    "worker process %d exited with code %d; stopping the others", child.pid, code
                )
                stopping.set()
                for other in children:
                    if other.poll() is None:
                        other.send_signal(signal.SIGTERM)
        time.sleep(POLL_SECONDS)
    return [(child.pid, exits[child.pid]) for child in children]


def watch_parent(parent_pid: int, request_stop: Callable[[], None]) -> threading.Event:
    """In a child: call ``request_stop`` once if the parent goes away (the child is then
    re-parented). Returns an event that ends the watch."""
    done = threading.Event()

    def watch() -> None:
        while not done.wait(PARENT_CHECK_SECONDS):
            if os.getppid() != parent_pid:
                logger.warning("parent process %d is gone; stopping", parent_pid)
                request_stop()
                return

    threading.Thread(target=watch, name="millrace-parent-watch", daemon=True).start()
    return done
