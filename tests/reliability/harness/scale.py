"""How big the reliability scenarios are: a CI tier (default) and a full tier.

``MILLRACE_RELIABILITY=full`` (what ``make reliability`` sets) selects the full sizes;
anything else runs the CI tier, sized so the whole ``tests/reliability`` directory stays
within a few minutes on a two-core machine. Scenarios read sizes from :data:`SCALE`
and never hard-code them, so both tiers assert the same criteria.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

FAST: dict[str, Any] = {
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
"""Worker settings for process tests: 2 s leases renewed every 0.5 s and fast polling,
so recovery after a kill takes seconds."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Scale:
    """Sizes of the scenarios (counts, and seconds where a duration is the point)."""

    name: str
    churn_jobs: int
    """Backlog drained while workers are SIGKILLed."""
    churn_workers: int
    churn_kills: int
    long_job_lease_periods: int
    """How many leases a healthy long job outlives."""
    healthy_long_jobs: int
    drain_jobs: int
    poison_limit: int
    """``INTERRUPTION_LIMIT`` of the poison scenario: kills before the verdict."""
    poison_bystanders: int
    recurring_definitions: int
    recurring_rounds: int
    recurring_schedulers: int
    atomic_jobs: int
    """Atomic jobs, each adding one to a counter, drained while workers are SIGKILLed."""
    atomic_kills: int


CI = Scale(
    name="ci",
    churn_jobs=600,
    churn_workers=3,
    churn_kills=6,
    long_job_lease_periods=4,
    healthy_long_jobs=2,
    drain_jobs=12,
    poison_limit=2,
    poison_bystanders=40,
    recurring_definitions=20,
    recurring_rounds=4,
    recurring_schedulers=3,
    atomic_jobs=600,
    atomic_kills=4,
)

FULL = Scale(
    name="full",
    churn_jobs=6000,
    churn_workers=4,
    churn_kills=30,
    long_job_lease_periods=10,
    healthy_long_jobs=6,
    drain_jobs=60,
    poison_limit=5,
    poison_bystanders=400,
    recurring_definitions=100,
    recurring_rounds=12,
    recurring_schedulers=4,
    atomic_jobs=2000,
    atomic_kills=10,
)

SCALE = FULL if os.environ.get("MILLRACE_RELIABILITY") == "full" else CI
"""The tier this run uses."""
