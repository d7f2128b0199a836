"""A worker's row in the storage's worker registry, written on each heartbeat.

The registry is for operators (the dashboard's workers page): it says who runs, where,
for which queues and how busy. Nothing reads it to decide ownership: a worker that
vanishes is shown as gone once its row is stale, and its jobs come back to the others
by their leases, never by its row. The scheduler deletes the row once it is older than
``worker_retention``. A failed write is logged and forgotten; the next heartbeat writes
again (re-creating a row deleted meanwhile).
"""

from __future__ import annotations

import logging
import os
import socket
from collections.abc import Collection
from datetime import datetime

from millrace_django.clock import Clock
from millrace_django.contract import JobStorage, WorkerHeartbeat

logger = logging.getLogger(__name__)


class WorkerRegistration:
    """One worker's registry row: built once, recorded on every :meth:`beat`."""

    def __init__(
        self,
        storage: JobStorage,
        clock: Clock,
        *,
        worker_id: str,
        queues: Collection[str],
        concurrency: int,
        hostname: str | None = None,
        pid: int | None = None,
        started_at: datetime | None = None,
    ) -> None:
        self._storage = storage
        self._clock = clock
        self.worker_id = worker_id
        self.queues = frozenset(queues)
        self.concurrency = concurrency
        self.hostname = hostname if hostname is not None else socket.gethostname()
        self.pid = pid if pid is not None else os.getpid()
        self.started_at = started_at if started_at is not None else clock.now()

    def heartbeat(self, in_flight: int) -> WorkerHeartbeat:
        """The row as of now, holding ``in_flight`` jobs."""
        return WorkerHeartbeat(
            worker_id=self.worker_id,
            hostname=self.hostname,
            pid=self.pid,
            queues=self.queues,
            concurrency=self.concurrency,
            in_flight=in_flight,
            started_at=self.started_at,
            seen_at=self._clock.now(),
        )

    def beat(self, in_flight: int) -> bool:
        """Record the row now; whether the storage took it (a storage without a
        registry, or a failed write, is not the worker's problem)."""
        record = getattr(self._storage, "record_worker_heartbeat", None)
        if record is None:
            return False
        try:
            record(self.heartbeat(in_flight))
        except Exception:
            logger.warning("cannot record the heartbeat of worker %s", self.worker_id)
            return False
        return True
