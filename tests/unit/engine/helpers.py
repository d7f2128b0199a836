"""Small moves the engine tests make through storage, as a worker would."""

from __future__ import annotations

from datetime import timedelta

from millrace_django.contract import ClaimRequest, JobRecord
from millrace_django.storage.memory import MemoryStorage

WORKER = "test-worker"


def claim(storage: MemoryStorage, *queues: str) -> JobRecord:
    """Claim exactly one job (there must be one)."""
    claimed = storage.claim(
        ClaimRequest(
            worker_id=WORKER,
            queues=frozenset(queues or ("default", "emails")),
            max_count=1,
            lease=timedelta(minutes=5),
        )
    )
    assert len(claimed) == 1, claimed
    return claimed[0]
