"""Seams for the host framework: the runtime itself knows nothing about Django.

The Django edge wraps each job and each loop turn in ``close_old_connections`` (a worker
thread must not keep a connection past ``CONN_MAX_AGE`` or after it broke), and each
thread the runtime starts in a scope that closes the thread's connections as it ends (a
session per thread would otherwise outlive a worker run inside a longer process, such
as ``call_command`` in a test suite); a script needs nothing and takes the defaults.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass

type Scope = Callable[[], AbstractContextManager[object]]
"""A context-manager factory, entered on the thread doing the work."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Hooks:
    """Context-manager factories entered on the thread doing the work."""

    around_job: Scope = nullcontext
    """Around one job's execution, on the thread that runs it."""

    around_turn: Scope = nullcontext
    """Around each turn of a runtime loop that talks to storage (claim, heartbeat,
    acknowledgement, scheduler pass), on that loop's thread."""

    around_thread: Scope = nullcontext
    """Around the whole life of each thread the runtime starts that talks to storage
    (job threads, heartbeat, acknowledgements, a scheduler on a thread of its own)."""


def daemon_thread(target: Callable[[], object], name: str, scope: Scope) -> threading.Thread:
    """A daemon thread (not started) running ``target`` inside ``scope``, the host's
    :attr:`Hooks.around_thread`."""

    def run() -> None:
        with scope():
            target()

    return threading.Thread(target=run, name=name, daemon=True)
