"""What the scenario modules share: the database marks, enqueueing the workload in
bulk, and stopping every worker cleanly before the checkers run."""

from __future__ import annotations

from uuid import UUID

import pytest

from millrace_django.contract import JobState
from millrace_django.engine import JobClient
from tests.conformance.django_harness import require_alias
from tests.reliability.harness import jobs
from tests.reliability.harness.rig import Rig
from tests.reliability.harness.supervisor import wait_for_exit

ALIAS = "postgres"
BATCH = 500


def postgres_marks() -> list[pytest.MarkDecorator]:
    """The ``pytestmark`` of a scenario module (skips it when PostgreSQL is absent,
    fails it in CI)."""
    require_alias(ALIAS, "MILLRACE_TEST_POSTGRES_URL")
    return [pytest.mark.postgres, pytest.mark.django_db(transaction=True, databases=[ALIAS])]


def enqueue_work(client: JobClient, count: int, seconds: float) -> list[UUID]:
    """``count`` ``work(seconds)`` jobs, inserted in batches as one backlog."""
    ids: list[UUID] = []
    for start in range(0, count, BATCH):
        size = min(BATCH, count - start)
        ids += client.storage.enqueue(
            [
                client.build(jobs.work, (seconds,), {}, state=JobState.ENQUEUED, key=None)
                for _ in range(size)
            ]
        )
    return ids


def stop_all(rig: Rig, timeout: float = 30.0) -> list[int]:
    """SIGTERM every slot (retired first, so none restarts) once its process is up (a
    signal during Django's start-up kills it uncleanly); their exit codes."""
    for slot in rig.supervisor.slots():
        if slot.process.running():
            rig.supervisor.wait_started(slot.name, timeout)
    processes = [rig.supervisor.stop(slot.name) for slot in rig.supervisor.slots()]
    return [wait_for_exit(process, timeout) for process in processes]


def terminal(ids: list[UUID], state: JobState = JobState.SUCCEEDED) -> dict[UUID, JobState]:
    return dict.fromkeys(ids, state)
