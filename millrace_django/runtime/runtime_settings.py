"""What the runtime reads from settings: plain values, no Django.

The Django edge hands over its ``MillraceSettings``, which has every attribute below;
scripts and tests use :class:`RuntimeSettings`. Durations that compare with job rows
(lease, heartbeat, timeouts) are measured on the injected clock; the others (polling,
shutdown, the scheduler's period) are real waits of this process.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Protocol

from millrace_django.contract import Limit
from millrace_django.engine import EngineConfig, EngineSettings


class WorkerConfig(EngineConfig, Protocol):
    """The settings a :class:`~millrace_django.runtime.Worker` reads."""

    @property
    def concurrency(self) -> int:
        """Jobs run at once by one worker (its default; a worker may be given its own)."""
        ...

    @property
    def async_concurrency(self) -> int:
        """``async def`` jobs run at once by one worker, on its event loop: they wait
        without a thread, so this bound is independent of ``concurrency``."""
        ...

    @property
    def lease(self) -> timedelta:
        """How long a claim holds a job without renewal; must exceed ``heartbeat``."""
        ...

    @property
    def heartbeat(self) -> timedelta:
        """How often in-flight leases are renewed and cancel requests noticed."""
        ...

    @property
    def claim_batch(self) -> int: ...

    @property
    def poll_min(self) -> timedelta: ...

    @property
    def poll_max(self) -> timedelta:
        """The polling ceiling, and the latency bound when a wake-up hint is lost."""
        ...

    @property
    def shutdown_timeout(self) -> timedelta:
        """Phase one of a graceful stop: how long in-flight jobs may finish."""
        ...

    @property
    def shutdown_grace(self) -> timedelta:
        """How long a job may keep running after its cancellation fired."""
        ...


class SchedulerConfig(Protocol):
    """The settings a :class:`~millrace_django.runtime.Scheduler` reads."""

    @property
    def queue_limits(self) -> Mapping[str, Limit]:
        """The limit recurring jobs of each queue carry (see ``EngineConfig``)."""
        ...

    @property
    def scheduler_interval(self) -> timedelta: ...

    @property
    def activation_batch(self) -> int:
        """Rows per storage call, for due activation and for recurring definitions."""
        ...

    @property
    def retention(self) -> timedelta | None:
        """How long finished jobs are kept; ``None`` keeps them forever."""
        ...

    @property
    def purge_batch(self) -> int: ...

    @property
    def worker_retention(self) -> timedelta | None:
        """How long the registry row of a silent worker is kept after its last heartbeat;
        ``None`` keeps every row forever."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class RuntimeSettings(EngineSettings):
    """A plain, validated :class:`WorkerConfig` and :class:`SchedulerConfig`."""

    concurrency: int = field(default_factory=lambda: max(8, 2 * (os.cpu_count() or 1)))
    """Threads for plain job functions: 8 at least, since most jobs of a web application
    wait on I/O (HTTP, mail, the database); threads start only when work needs them, so
    quick jobs still run on one or two."""
    async_concurrency: int = 500
    """Coroutines of ``async def`` jobs at once: they hold no thread while they wait, so
    this can be far above ``concurrency``; it bounds the sockets and connections they
    open at once."""
    lease: timedelta = timedelta(minutes=5)
    heartbeat: timedelta = timedelta(minutes=1)
    claim_batch: int = 64
    poll_min: timedelta = timedelta(milliseconds=200)
    poll_max: timedelta = timedelta(seconds=5)
    shutdown_timeout: timedelta = timedelta(seconds=15)
    shutdown_grace: timedelta = timedelta(seconds=2)
    scheduler_interval: timedelta = timedelta(seconds=1)
    activation_batch: int = 100
    retention: timedelta | None = timedelta(days=7)
    purge_batch: int = 1000
    worker_retention: timedelta | None = timedelta(days=1)
    """A day: a worker that died overnight is still on the dashboard (as gone) the next
    morning, while a cluster that starts a new worker id per pod start keeps one day of
    starts, not a table that grows forever."""
    clock_sync: bool = True
    """Calibrate the clock to the database's (see :class:`~millrace_django.runtime.ClockSync`)."""
    clock_skew_warning: timedelta = timedelta(seconds=1)
    """A measured offset beyond this is logged as a warning (and corrected all the same)."""

    def __post_init__(self) -> None:
        EngineSettings.__post_init__(self)
        check_worker_config(self)
        check_scheduler_config(self)
        _require(self.clock_skew_warning > timedelta(0), "clock_skew_warning must be positive")
        _require(
            self.worker_retention is None or self.worker_retention > self.lease,
            f"worker_retention ({self.worker_retention}) must be longer than lease "
            f"({self.lease}), or a worker could be forgotten while its leases still hold",
        )


def check_worker_config(config: WorkerConfig) -> None:
    """Raise ``ValueError`` for settings a worker cannot run with."""
    _require(config.concurrency >= 1, "concurrency must be at least 1")
    _require(config.async_concurrency >= 1, "async_concurrency must be at least 1")
    _require(config.claim_batch >= 1, "claim_batch must be at least 1")
    _require(config.heartbeat > timedelta(0), "heartbeat must be positive")
    _require(
        config.lease > config.heartbeat,
        f"lease ({config.lease}) must be longer than heartbeat ({config.heartbeat}), "
        "or leases expire before they are renewed",
    )
    _require(config.poll_min > timedelta(0), "poll_min must be positive")
    _require(config.poll_max >= config.poll_min, "poll_max must not be shorter than poll_min")
    _require(config.shutdown_timeout >= timedelta(0), "shutdown_timeout must not be negative")
    _require(config.shutdown_grace >= timedelta(0), "shutdown_grace must not be negative")


def check_scheduler_config(config: SchedulerConfig) -> None:
    """Raise ``ValueError`` for settings a scheduler cannot run with."""
    _require(config.scheduler_interval > timedelta(0), "scheduler_interval must be positive")
    _require(config.activation_batch >= 1, "activation_batch must be at least 1")
    _require(config.purge_batch >= 1, "purge_batch must be at least 1")
    _require(
        config.retention is None or config.retention > timedelta(0),
        "retention must be positive or None",
    )
    _require(
        config.worker_retention is None or config.worker_retention > timedelta(0),
        "worker_retention must be positive or None",
    )


def _require(condition: bool, message: str) -> None:
    if not condition:
        raise ValueError(message)
