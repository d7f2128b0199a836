"""Seams for the host framework: the runtime itself knows nothing about Django.

The Django edge wraps each job and each loop turn in ``close_old_connections`` (a worker
thread must not keep a connection past ``CONN_MAX_AGE`` or after it broke); a script
needs nothing and takes the defaults.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class Hooks:
    """Context-manager factories entered on the thread doing the work."""

    around_job: Callable[[], AbstractContextManager[object]] = nullcontext
    """Around one job's execution, on the thread that runs it."""

    around_turn: Callable[[], AbstractContextManager[object]] = nullcontext
    """Around each turn of a runtime loop that talks to storage (claim, heartbeat,
    acknowledgement, scheduler pass), on that loop's thread."""
