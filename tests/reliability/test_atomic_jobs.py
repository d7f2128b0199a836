"""Atomic jobs under SIGKILL churn: exactly-once database effects from at-least-once
execution.

Real ``manage.py millrace_worker`` processes under the harness's supervisor (which
restarts the dead ones) drain jobs of
:func:`~tests.integration.atomic_jobs.bump`, each adding one to a counter row in its
own transaction, while the test SIGKILLs a worker chosen at random, at moments spread
over the drain. Every
job ends ``succeeded``, some only after an attempt killed mid-run, and the counter ends
at exactly the number of jobs: each job's write committed once, with its success,
however many times it ran. (The same jobs without ``atomic=True`` overshoot: an attempt
killed between its write and its acknowledgement runs again.)

Leases are 2 s, renewed every 0.5 s; workers keep their connections
(``CONN_MAX_AGE = None``), as a worker running many atomic jobs should.
"""

from __future__ import annotations

import random
import time
from functools import partial

from millrace_django.contract import JobState
from millrace_django.engine import JobClient
from millrace_django.models import JOB_STATE_CODES, Job
from tests.integration import atomic_jobs
from tests.reliability.harness.processes import wait_until
from tests.reliability.harness.rig import Rig
from tests.reliability.harness.scale import SCALE
from tests.reliability.harness.supervisor import WORKER_STARTED
from tests.reliability.scenarios import ALIAS, BATCH, postgres_marks, stop_all

pytestmark = postgres_marks()

WORKERS = 3
COUNTER = "churn"
WORKER_ALIAS = "default"
"""The worker processes' name for this same database (their storage's alias)."""


def test_sigkill_churn_leaves_a_counter_of_atomic_jobs_at_exactly_their_number(
    client: JobClient, rig: Rig
) -> None:
    total, kills = SCALE.atomic_jobs, SCALE.atomic_kills
    rig.configure({}, {"CONN_MAX_AGE": None})
    rig.supervisor.max_restarts = kills
    chance = random.Random()
    with atomic_jobs.counter_table(ALIAS, COUNTER):
        for start in range(0, total, BATCH):
            client.storage.enqueue(
                [
                    client.build(
                        atomic_jobs.bump,
                        (WORKER_ALIAS, COUNTER),
                        {},
                        state=JobState.ENQUEUED,
                        key=None,
                    )
                    for _ in range(min(BATCH, total - start))
                ]
            )
        began = time.monotonic()
        names = [f"worker-{n}" for n in range(WORKERS)]
        for name in names:
            rig.supervisor.worker(name)
        for kill in range(1, kills + 1):
            # Spread over the drain (by progress, whatever the machine's pace), at random.
            due = total * kill // (kills + 2)
            wait_until(partial(_succeeded_at_least, due), 60, f"{due} successes")
            time.sleep(chance.uniform(0, 0.2))
            up = [n for n in names if WORKER_STARTED in rig.supervisor.slot(n).process.log()]
            name = chance.choice(up or names)
            rig.supervisor.wait_started(name)
            rig.supervisor.kill(name)  # returns once the supervisor has restarted it
        killed_by = _succeeded()
        assert rig.supervisor.restarts == kills

        wait_until(lambda: _succeeded() == total, 120, f"{total} successes")
        drained = time.monotonic() - began
        assert stop_all(rig) == [0] * WORKERS
        rig.supervisor.check()

        rerun = Job.objects.using(ALIAS).filter(attempt__gt=1).count()
        print(
            f"{total} atomic jobs in {drained:.1f} s; {kills} kills, the last with "
            f"{killed_by} done; {rerun} jobs ran again"
        )
        assert atomic_jobs.count(ALIAS, COUNTER) == total
        assert killed_by < total  # the churn hit the backlog while it drained...
        assert rerun > 0  # ...and killed attempts mid-run, which ran again


def _succeeded() -> int:
    state = JOB_STATE_CODES[JobState.SUCCEEDED]
    return Job.objects.using(ALIAS).filter(state=state).count()


def _succeeded_at_least(count: int) -> bool:
    return _succeeded() >= count
