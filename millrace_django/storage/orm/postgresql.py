"""PostgreSQL's hot statements, hand-written: a batch claim in one statement and a batch
acknowledgement in one statement (plus one to wake continuations, when asked; and one
``pg_notify`` at the end of the transaction when that woke any).

Same contract as :class:`~millrace_django.storage.orm.hotpath.OrmHotPath`; table and
column names come from the models, so the SQL follows the schema.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import connections
from django.db.models import JSONField

from millrace_django.contract import (
    ATTEMPT_HISTORY_CAP,
    ClaimRequest,
    JobRecord,
    JobTransition,
)
from millrace_django.models import AttemptOutcomeCode, Job, JobAttempt
from millrace_django.models import JobStateCode as Code
from millrace_django.storage.orm.context import OrmContext
from millrace_django.storage.orm.rows import job_record


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


_JOBS = _q(Job._meta.db_table)
_ATTEMPTS = _q(JobAttempt._meta.db_table)
_COLUMNS = ", ".join(f"j.{_q(f.column)}" for f in Job._meta.concrete_fields if f.column)

# Lock the next claimable rows, remember what they were (an expired lease is recorded as
# an interrupted attempt of its previous owner, and that job's history pruned), lease
# them. Two sources, each read in claim order from its own partial index and stopping
# after LIMIT rows: enqueued jobs (millrace_job_ready, one ordered scan per queue) and
# expired leases (millrace_job_leased, by lease_until: few rows). The top LIMIT of both
# are leased; the rest stay locked until the statement's transaction ends. All CTEs see
# one snapshot; RETURNING order is unspecified, hence the final ORDER BY.
_READY_ONE_QUEUE = f"""
    SELECT seq, priority, attempt, worker_id, false AS expired
    FROM {_JOBS}
    WHERE queue = %(queue)s AND state = {Code.ENQUEUED}
    ORDER BY priority DESC, seq
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
"""
_READY_QUEUES = f"""
    SELECT r.* FROM unnest(%(queues)s::text[]) AS q (name)
    CROSS JOIN LATERAL (
        SELECT seq, priority, attempt, worker_id, false AS expired
        FROM {_JOBS}
        WHERE queue = q.name AND state = {Code.ENQUEUED}
        ORDER BY priority DESC, seq
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED
    ) AS r
"""
_CLAIM_SQL = f"""
WITH ready AS ({{ready}}
), expired AS (
    SELECT seq, priority, attempt, worker_id, true AS expired
    FROM {_JOBS}
    WHERE state = {Code.PROCESSING} AND lease_until <= %(now)s AND {{queue_test}}
    ORDER BY priority DESC, seq
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), picked AS (
    SELECT seq, expired, attempt AS prior_attempt, worker_id AS prior_worker
    FROM (SELECT * FROM ready UNION ALL SELECT * FROM expired) AS candidates
    ORDER BY priority DESC, seq
    LIMIT %(limit)s
), leased AS (
    UPDATE {_JOBS} AS j
    SET state = {Code.PROCESSING}, worker_id = %(worker)s, lease_until = %(until)s,
        attempt = j.attempt + 1
    FROM picked
    WHERE j.seq = picked.seq
    RETURNING {_COLUMNS}
), interrupted AS (
    INSERT INTO {_ATTEMPTS} (job_id, attempt, outcome, recorded_at, worker_id, error)
    SELECT seq, prior_attempt, {AttemptOutcomeCode.INTERRUPTED}, %(now)s,
           prior_worker, NULL
    FROM picked
    WHERE expired
    ON CONFLICT (job_id, attempt) DO NOTHING
), pruned AS (
    DELETE FROM {_ATTEMPTS} AS a
    USING picked
    WHERE picked.expired AND a.job_id = picked.seq
      AND a.attempt < picked.prior_attempt - {ATTEMPT_HISTORY_CAP - 1}
)
SELECT * FROM leased ORDER BY priority DESC, seq
"""
_CLAIM_ONE_QUEUE = _CLAIM_SQL.format(ready=_READY_ONE_QUEUE, queue_test="queue = %(queue)s")
_CLAIM_QUEUES = _CLAIM_SQL.format(ready=_READY_QUEUES, queue_test="queue = ANY(%(queues)s)")

# Fenced, set-based acknowledgement: a row moves only if it still matches its own
# transition's (processing, worker, attempt).
_COMPLETE_SQL = """
UPDATE {jobs} AS j
SET state = {succeeded}, worker_id = NULL, lease_until = NULL, key_scope = NULL,
    failures = done.failures, finished_at = done.finished_at, result = done.result
FROM (VALUES {rows}) AS done (uuid, worker_id, attempt, failures, finished_at, result)
WHERE j.uuid = done.uuid AND j.state = {processing}
  AND j.worker_id = done.worker_id AND j.attempt = done.attempt
RETURNING j.uuid
"""
_JSON = JSONField()
_FIRST_ROW = "(%s::uuid, %s, %s::integer, %s::integer, %s::timestamptz, %s::jsonb)"
_NEXT_ROW = "(%s, %s, %s, %s, %s, %s)"

# A separate statement, so it sees continuations committed while the UPDATE above
# waited for their parent's row lock. Their queues feed the wake-up hint.
_WAKE_SQL = f"""
WITH woken AS (
    UPDATE {_JOBS} SET state = {Code.ENQUEUED}, due_at = NULL
    WHERE parent_id = ANY(%s) AND state = {Code.AWAITING}
    RETURNING queue
)
SELECT DISTINCT queue FROM woken
"""


class PostgresHotPath:
    """One round trip per batch claim and per batch acknowledgement."""

    def claim(self, ctx: OrmContext, request: ClaimRequest) -> list[JobRecord]:
        now = ctx.clock.now()
        params: dict[str, Any] = {
            "now": now,
            "limit": request.max_count,
            "worker": request.worker_id,
            "until": now + request.lease,
        }
        if len(request.queues) == 1:
            (params["queue"],) = request.queues
            sql = _CLAIM_ONE_QUEUE
        else:
            params["queues"] = sorted(request.queues)
            sql = _CLAIM_QUEUES
        rows = Job.objects.using(ctx.alias).raw(sql, params)
        return [job_record(row) for row in rows]

    def complete(self, ctx: OrmContext, transitions: Sequence[JobTransition]) -> list[bool]:
        now = ctx.clock.now()
        connection = connections[ctx.alias]
        params: list[Any] = []
        for t in transitions:
            params += [
                t.job_id,
                t.expected_worker_id,
                t.expected_attempt,
                t.failures,
                t.finished_at or now,
                _JSON.get_db_prep_value(t.result, connection),
            ]
        rows = ", ".join([_FIRST_ROW] + [_NEXT_ROW] * (len(transitions) - 1))
        sql = _COMPLETE_SQL.format(
            jobs=_JOBS, succeeded=Code.SUCCEEDED, processing=Code.PROCESSING, rows=rows
        )
        with connection.cursor() as cursor:
            cursor.execute(sql, params)
            won = {uuid for (uuid,) in cursor.fetchall()}
            woken = [t.job_id for t in transitions if t.job_id in won and t.activate_continuations]
            if woken:
                cursor.execute(_WAKE_SQL, [woken])
                ctx.tx.enqueued(queue for (queue,) in cursor.fetchall())
        return [t.job_id in won for t in transitions]
