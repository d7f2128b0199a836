"""The checkers catch each broken promise they exist for: a harness that passes
everything would prove nothing. Jobs are broken on purpose, by hand-written row updates
(journaled by the triggers as any write is) and ledger lines, and the report must name
exactly that breakage, and nothing for the sound ones."""

from __future__ import annotations

import psycopg

from millrace_django.contract import JobState
from millrace_django.engine import JobClient
from tests.reliability.harness.checkers import Exit
from tests.reliability.harness.ledger import append
from tests.reliability.harness.rig import Rig
from tests.reliability.scenarios import enqueue_work, postgres_marks

pytestmark = postgres_marks()

LIVE = "now() + interval '1 hour'"
EXPIRED = "now() - interval '1 second'"
BROKEN = {
    "revived": "illegal transition succeeded -> enqueued",
    "early reclaim": "reclaimed before its lease ended",
    "ran twice": "attempt 1 ran 2 times",
    "overlap after a release": "executions overlap though the first kept its claim (released)",
    "phantom success": "attempt 1 recorded a success no execution finished",
    "left running": "ended processing",
    "given back though it ran": "attempt 1 was given back though it ran",
    "attempt lowered by a success": "a non-claim changed the attempt",
    "give-back recorded as an interruption": "claimed by b but its history row names a",
}
SOUND = ["fenced overlap", "given back", "plain"]


def test_the_checkers_name_every_kind_of_broken_promise(client: JobClient, rig: Rig) -> None:
    names = [*BROKEN, *SOUND]
    job = dict(zip(names, enqueue_work(client, len(names), 0.0), strict=True))

    def run(name: str, attempt: int, pid: int, *, finish: bool = True) -> None:
        append("start", job[name], attempt, pid, rig.ledger.directory)
        if finish:
            append("finish", job[name], attempt, pid, rig.ledger.directory)

    with psycopg.connect(rig.url, autocommit=True) as db:

        def claim(name: str, worker: str, lease: str) -> None:
            db.execute(
                "UPDATE millrace_job SET state = 2, worker_id = %s, attempt = attempt + 1,"
                f" lease_until = {lease} WHERE uuid = %s",
                (worker, job[name]),
            )

        def move(name: str, state: JobState) -> None:
            code = {JobState.ENQUEUED: 1, JobState.SUCCEEDED: 3}[state]
            db.execute(
                "UPDATE millrace_job SET state = %s, worker_id = NULL, lease_until = NULL"
                " WHERE uuid = %s",
                (code, job[name]),
            )

        def give_back(name: str) -> None:
            """A release that gives the attempt back, as one that never started."""
            db.execute(
                "UPDATE millrace_job SET state = 1, worker_id = NULL, lease_until = NULL,"
                " attempt = attempt - 1 WHERE uuid = %s",
                (job[name],),
            )

        def interrupted(name: str) -> None:
            """The history row a provider writes for an interrupted first attempt."""
            db.execute(
                "INSERT INTO millrace_job_attempt (job_id, attempt, outcome, recorded_at,"
                " worker_id) SELECT seq, 1, 1, now(), 'a' FROM millrace_job WHERE uuid = %s",
                (job[name],),
            )

        for name in names:
            claim(name, "a", LIVE if name == "early reclaim" else EXPIRED)
        claim("early reclaim", "b", LIVE)  # while a's lease is live
        claim("fenced overlap", "b", LIVE)  # a's lease had expired
        interrupted("fenced overlap")
        move("overlap after a release", JobState.ENQUEUED)
        claim("overlap after a release", "b", LIVE)
        give_back("given back")
        claim("given back", "b", LIVE)
        run("given back though it ran", 1, 111)  # between its claim and its give-back
        give_back("given back though it ran")
        claim("given back though it ran", "b", LIVE)
        give_back("give-back recorded as an interruption")
        interrupted("give-back recorded as an interruption")
        claim("give-back recorded as an interruption", "b", EXPIRED)
        claim("give-back recorded as an interruption", "c", LIVE)  # records nothing: taken
        for name in names:
            if name not in ("left running", "attempt lowered by a success"):
                move(name, JobState.SUCCEEDED)
        move("revived", JobState.ENQUEUED)
        db.execute(
            "UPDATE millrace_job SET state = 3, worker_id = NULL, lease_until = NULL,"
            " attempt = attempt - 1 WHERE uuid = %s",
            (job["attempt lowered by a success"],),
        )

    run("revived", 1, 101)
    run("early reclaim", 2, 102)
    run("ran twice", 1, 103)
    run("ran twice", 1, 104)
    run("overlap after a release", 1, 105, finish=False)  # runs on past its release
    run("overlap after a release", 2, 106)
    run("left running", 1, 107, finish=False)
    run("fenced overlap", 1, 108, finish=False)  # runs on past losing its lease
    run("fenced overlap", 2, 109)
    run("plain", 1, 110)
    run("given back", 1, 112)  # the claim after the give-back runs the attempt
    run("attempt lowered by a success", 1, 113)
    run("give-back recorded as an interruption", 2, 114)

    report = rig.check(dict.fromkeys(job.values(), JobState.SUCCEEDED))
    for name, finding in BROKEN.items():
        assert any(finding in f for f in report.audits[job[name]].findings), (
            name,
            report.audits[job[name]].findings,
        )
    for name in SOUND:
        assert report.audits[job[name]].findings == [], name
    assert report.audits[job["fenced overlap"]].fenced_overlaps == 1
    given_back = report.audits[job["given back"]]
    assert [claim.worker for claim, _ in given_back.given_back] == ["a"]
    assert given_back.exits == {1: Exit.SUCCEEDED}
    assert report.counts["given back"] == 3
    try:
        report.assert_clean()
    except AssertionError as error:
        assert f"in {len(BROKEN)} jobs" in str(error)
    else:
        raise AssertionError("assert_clean passed a broken run")
