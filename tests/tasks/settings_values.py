"""Setting values the tests and their worker processes share (no Django imports, so a
settings module can import them)."""

from __future__ import annotations

BACKEND = "millrace_django.tasks_backend.MillraceBackend"
QUEUES = ["default", "emails", "reports"]
TASKS = {"default": {"BACKEND": BACKEND, "QUEUES": QUEUES}}
"""The ``TASKS`` setting of the tests (and of their worker processes)."""

FAST_MILLRACE = {
    "QUEUES": QUEUES,
    "CONCURRENCY": 4,
    "LEASE": 5,
    "HEARTBEAT": 0.5,
    "POLL_MIN": 0.05,
    "POLL_MAX": 0.2,
    "SCHEDULER_INTERVAL": 0.1,
    "SHUTDOWN_TIMEOUT": 10,
    "SHUTDOWN_GRACE": 1,
}
"""Fast polling and scheduling, so a worker picks up a due retry within a fraction of a
second."""
