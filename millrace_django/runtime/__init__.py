"""L2, the runtime: worker pool, scheduler, wake-ups, shutdown. Receives a provider.

Nothing here imports Django or chooses a provider: the edge (management commands)
builds a storage, a clock and settings, passes them in, and injects its connection
hygiene through :class:`Hooks`.
"""

from millrace_django.runtime.clock_sync import ClockOffset, ClockSync, measure_offset
from millrace_django.runtime.execution import Outcome, run_claimed
from millrace_django.runtime.hooks import Hooks
from millrace_django.runtime.runtime_settings import RuntimeSettings, SchedulerConfig, WorkerConfig
from millrace_django.runtime.scheduler import (
    Scheduler,
    SchedulerPass,
    activate_due,
    expire_due,
    fire_due_recurring,
    purge_finished,
)
from millrace_django.runtime.shutdown import handle_stop_signals
from millrace_django.runtime.worker import Worker, WorkerStats, default_worker_id

__all__ = [
    "ClockOffset",
    "ClockSync",
    "Hooks",
    "Outcome",
    "RuntimeSettings",
    "Scheduler",
    "SchedulerConfig",
    "SchedulerPass",
    "Worker",
    "WorkerConfig",
    "WorkerStats",
    "activate_due",
    "default_worker_id",
    "expire_due",
    "fire_due_recurring",
    "handle_stop_signals",
    "measure_offset",
    "purge_finished",
    "run_claimed",
]
