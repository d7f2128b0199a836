"""Jobs a worker cannot run (their code is gone, or their stored arguments cannot be
decoded) end dead at their first claim with an error that names the cause, spend no
execution, and the worker goes on with the rest.

The bad rows are written directly into the jobs table, as a bad deploy or a hand-edited
row would leave them. A row whose retry policy cannot be read is still runnable: it runs
once, without retries, instead of failing the claim that leased it.
"""

from __future__ import annotations

import json

import psycopg

from millrace_django.contract import JobState
from millrace_django.engine import JobClient
from tests.reliability.harness.checkers import Exit
from tests.reliability.harness.processes import wait_until
from tests.reliability.harness.rig import Rig
from tests.reliability.scenarios import enqueue_work, postgres_marks, stop_all, terminal

pytestmark = postgres_marks()

WORK = "tests.reliability.harness.jobs:work"
BAD = {
    "module gone": (
        "tests.reliability.harness.gone:work",
        {"args": [0.0], "kwargs": {}},
        "cannot import module 'tests.reliability.harness.gone'",
    ),
    "function gone": (
        "tests.reliability.harness.jobs:vanished",
        {"args": [0.0], "kwargs": {}},
        "module 'tests.reliability.harness.jobs' has no job 'vanished'",
    ),
    "not a job": (
        "tests.reliability.harness.ledger:append",
        {"args": [], "kwargs": {}},
        "is not decorated with @job",
    ),
    "arguments no longer fit": (WORK, {"args": [], "kwargs": {"pause": 1}}, "no longer fit"),
    "arguments not an object": (WORK, "garbage", "not a list"),
    "arguments of the wrong types": (WORK, {"args": {"a": 1}, "kwargs": []}, "not a list"),
    "arguments missing": (WORK, {}, "not a list"),
    "keyword arguments not an object": (WORK, {"args": [0.0], "kwargs": [1]}, "not an object"),
}
"""Case: (target, stored arguments, what its error must say)."""


def test_jobs_with_missing_code_or_undecodable_arguments_end_dead_and_the_worker_goes_on(
    client: JobClient, rig: Rig
) -> None:
    bad = dict(zip(BAD, enqueue_work(client, len(BAD), 0.0), strict=True))
    with psycopg.connect(rig.url, autocommit=True) as connection:
        for case, job_id in bad.items():
            target, arguments, _ = BAD[case]
            connection.execute(
                "UPDATE millrace_job SET target = %s, arguments = %s::jsonb WHERE uuid = %s",
                (target, json.dumps(arguments), job_id),
            )
    good = enqueue_work(client, 20, 0.01)  # behind the bad ones in claim order
    with psycopg.connect(rig.url, autocommit=True) as connection:
        # An unreadable retry policy leaves the job runnable: it runs, without retries.
        connection.execute(
            "UPDATE millrace_job SET retry = '\"garbage\"'::jsonb WHERE uuid = %s", (good[0],)
        )
    rig.supervisor.worker("worker", "--concurrency=2")
    wait_until(lambda: len(rig.ledger.finished()) == len(good), 30, "every good job finished")
    assert stop_all(rig) == [0]

    report = rig.check({**terminal(list(bad.values()), JobState.DEAD), **terminal(good)})
    print(report.summary())
    report.assert_clean()
    assert rig.supervisor.restarts == 0
    for case, job_id in bad.items():
        audit = report.audits[job_id]
        assert audit.exits == {1: Exit.FAILED}, case  # dead at its first claim
        assert audit.executions == [], case  # never ran
        assert audit.row is not None and audit.row.failures == 1, case
        assert BAD[case][2] in (audit.row.last_error or ""), (case, audit.row.last_error)
    for job_id in good:
        assert report.audits[job_id].exits == {1: Exit.SUCCEEDED}
