"""The hot statements' SQL text, in one place: the claim, the acknowledgement and the
continuations it wakes, workflow steps' checkpoints, taking bookmarks, the enqueue (an
``INSERT`` of JSON rows, or ``COPY``) and the scheduler's due work. Table and column
names come from the models, so the SQL follows the schema."""

from __future__ import annotations

from functools import cache

from django.db.backends.base.base import BaseDatabaseWrapper

from millrace_django.contract import (
    ACTIVE_JOB_STATES,
    ATTEMPT_HISTORY_CAP,
    JobState,
    OverlapPolicy,
)
from millrace_django.contract.catalog import RUN_TIME_BOUNDS
from millrace_django.models import (
    AttemptOutcomeCode,
    Bookmark,
    FinishedMinute,
    Job,
    JobAttempt,
    PausedQueue,
    Recurring,
    RunMinute,
    Tally,
    TallySubject,
    WorkflowInstance,
    job_codes,
)
from millrace_django.models import JobStateCode as Code
from millrace_django.storage.orm import tallies
from millrace_django.storage.orm.postgresql.session import Statement
from millrace_django.storage.orm.rows import JobRowReader


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


_JOBS = _q(Job._meta.db_table)
_ATTEMPTS = _q(JobAttempt._meta.db_table)
_PAUSED = _q(PausedQueue._meta.db_table)
_TALLIES = _q(Tally._meta.db_table)
_MINUTES = _q(FinishedMinute._meta.db_table)
_RUNS = _q(RunMinute._meta.db_table)
_INSTANCES = _q(WorkflowInstance._meta.db_table)
_BOOKMARKS = _q(Bookmark._meta.db_table)
_RECURRING = _q(Recurring._meta.db_table)
_ACTIVE = ", ".join(str(code) for code in job_codes(ACTIVE_JOB_STATES))
_WAITING = ", ".join(str(code) for code in job_codes({JobState.SCHEDULED, JobState.FAILED}))
_FIELDS = list(Job._meta.concrete_fields)
# A row's values are keyed by field name (rows.job_values), which is its column name too.
assert all(f.attname == f.column for f in _FIELDS), "a Job column was renamed"
CLAIMED = JobRowReader(
    known=("state", "worker_id", "lease_until", "finished_at", "result", "started_at")
)
"""Fields a claim sets (or, the job being active, knows to be NULL): not read back."""
_RETURNED = ", ".join(f"j.{_q(name)}" for name in [*CLAIMED.columns, "seq"])  # seq: to sort


# -- claim -----------------------------------------------------------------------------

# Lock the next claimable rows, remember what they were (an expired lease is recorded as
# an interrupted attempt of its previous owner, and that job's history pruned), lease
# them. Two sources, each read in claim order from its own partial index and stopping
# after LIMIT rows: enqueued jobs (millrace_job_ready, one ordered scan per queue) and
# expired leases (millrace_job_leased, by lease_until: few rows). The top LIMIT of both
# are leased; the rest stay locked until the statement's transaction ends. All CTEs see
# one snapshot; RETURNING order is unspecified, hence the final ORDER BY. A paused queue
# (a row of millrace_paused_queue, probed by primary key) contributes nothing, nor does
# an enqueued job past its deadline (the scheduler's sweep ends it). Jobs that carry
# limits are not read (NOT limited: the plain lane of millrace_job_ready): the limited
# claim takes them (limits.py). The statement only says, in a last row of its own
# (waiting = true), whether any such job waits in these queues, so that the next claim
# knows to run the limited claim: an index probe each.
_UNEXPIRED = "(expires_at IS NULL OR expires_at > %(now)s)"
_READY_ONE_QUEUE = f"""
    SELECT seq, priority, attempt, worker_id, false AS expired
    FROM {_JOBS}
    WHERE queue = %(queue)s AND state = {Code.ENQUEUED} AND NOT limited
      AND NOT EXISTS (SELECT FROM {_PAUSED} AS p WHERE p.queue = %(queue)s)
      AND {_UNEXPIRED}
    ORDER BY priority DESC, seq
    LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED"""
_READY_QUEUES = f"""
    SELECT r.* FROM (
        SELECT name FROM unnest(%(queues)s::text[]) AS u (name)
        WHERE NOT EXISTS (SELECT FROM {_PAUSED} AS p WHERE p.queue = u.name)
    ) AS q
    CROSS JOIN LATERAL (
        SELECT seq, priority, attempt, worker_id, false AS expired
        FROM {_JOBS}
        WHERE queue = q.name AND state = {Code.ENQUEUED} AND NOT limited AND {_UNEXPIRED}
        ORDER BY priority DESC, seq
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED
    ) AS r"""
_CLAIM = f"""
WITH ready AS ({{ready}}
), expired AS (
    SELECT seq, priority, attempt, worker_id, true AS expired
    FROM {_JOBS}
    WHERE state = {Code.PROCESSING} AND lease_until <= %(now)s AND {{queue_test}}
      AND NOT limited
      AND NOT EXISTS (SELECT FROM {_PAUSED} AS p WHERE p.queue = {_JOBS}.queue)
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
        attempt = j.attempt + 1, started_at = %(now)s
    FROM picked
    WHERE j.seq = picked.seq
    RETURNING {_RETURNED}
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
), waiting AS (
    SELECT EXISTS (
        SELECT FROM {_JOBS}
        WHERE state = {Code.ENQUEUED} AND limited AND {{queue_test}}
          AND NOT EXISTS (SELECT FROM {_PAUSED} AS p WHERE p.queue = {_JOBS}.queue)
    ) OR EXISTS (
        SELECT FROM {_JOBS}
        WHERE state = {Code.PROCESSING} AND limited AND lease_until <= %(now)s
          AND {{queue_test}}
    ) AS found
)
SELECT *, false AS waiting FROM leased
UNION ALL
SELECT {", ".join(["NULL"] * (len(CLAIMED.columns) + 1))}, true FROM waiting WHERE found
ORDER BY waiting, priority DESC, seq
"""
_CLAIM_PARAMETERS = {"limit": "integer", "now": "timestamptz", "worker": "text"}
CLAIM_ONE_QUEUE = Statement(
    "claim",
    _CLAIM.format(ready=_READY_ONE_QUEUE, queue_test="queue = %(queue)s"),
    {"queue": "text", **_CLAIM_PARAMETERS, "until": "timestamptz"},
)
CLAIM_QUEUES = Statement(
    "claim_queues",
    _CLAIM.format(ready=_READY_QUEUES, queue_test="queue = ANY(%(queues)s)"),
    {"queues": "text[]", **_CLAIM_PARAMETERS, "until": "timestamptz"},
)


# -- acknowledgement -------------------------------------------------------------------

# Fenced, set-based: a row moves only if it still matches its own transition's
# (processing, worker, attempt). Each row is found through the uuid index, one probe per
# transition. Every fence condition is a condition of the join, none a filter on the job
# table alone (the state is compared with an expression of the transition's row): a
# filter makes the planner take the jobs for the few-row side of the join whenever its
# statistics are thin (a young or just truncated table, a plan made early), and then it
# reads every in-flight row once per transition, cost that grows with the batch times
# the rows in flight. A row that moved answers its transition's position in the batch
# (1-based), cheaper to read back than its uuid. The same statement appends the batch's
# tally rows (one per queue, target and tenant it ended), its per-minute rows (one per
# UTC minute its jobs finished in) and its run-time rows (one per minute, target, tenant
# and run-time bucket, the bucket found as contract.catalog.run_time_bucket finds it):
# see tallies.py.
_RUN_TIME_BOUNDS = "'{" + ",".join(map(str, RUN_TIME_BOUNDS)) + "}'::float8[]"
COMPLETE = Statement(
    "complete",
    f"""
WITH done AS (
    UPDATE {_JOBS} AS j
    SET state = {Code.SUCCEEDED}, worker_id = NULL, lease_until = NULL, key_scope = NULL,
        failures = t.failures, finished_at = t.finished_at, result = t.result
    FROM unnest(%(ids)s::uuid[], %(workers)s::text[], %(attempts)s::integer[],
                %(failures)s::integer[], %(finished)s::timestamptz[], %(results)s::jsonb[])
         WITH ORDINALITY AS t (uuid, worker_id, attempt, failures, finished_at, result, n)
    WHERE j.uuid = t.uuid AND j.worker_id = t.worker_id AND j.attempt = t.attempt
      AND j.state = t.attempt * 0 + {Code.PROCESSING}
    RETURNING t.n, j.queue, j.target, j.tenant_id, j.limited,
        date_trunc('minute', t.finished_at AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' AS minute,
        width_bucket(
            greatest(extract(epoch FROM t.finished_at - j.started_at), 0)::float8,
            {_RUN_TIME_BOUNDS}
        ) AS bucket
), tallied AS (
    INSERT INTO {_TALLIES} (subject, state, queue, target, tenant_id, n)
    SELECT {TallySubject.JOB}, {Code.SUCCEEDED}, queue, target, tenant_id, count(*)
    FROM done GROUP BY queue, target, tenant_id
), per_minute AS (
    INSERT INTO {_MINUTES} (minute, state, n)
    SELECT minute, {Code.SUCCEEDED}, count(*) FROM done GROUP BY minute
), timed AS (
    INSERT INTO {_RUNS} (minute, target, tenant_id, bucket, n)
    SELECT minute, target, tenant_id, bucket, count(*) FROM done WHERE bucket IS NOT NULL
    GROUP BY minute, target, tenant_id, bucket
), freed AS (
    SELECT pg_notify(%(channel)s, queue)
    FROM (SELECT DISTINCT queue FROM done WHERE limited AND %(channel)s <> '') AS q
)
SELECT n FROM done, (SELECT count(*) FROM freed) AS hinted""",
    {
        "ids": "uuid[]",
        "workers": "text[]",
        "attempts": "integer[]",
        "failures": "integer[]",
        "finished": "timestamptz[]",
        "results": "jsonb[]",
        "channel": "text",
    },
)

# Even so, a batch that is large next to the table (hundreds of transitions, a table of
# a few thousand rows, or one the statistics still take for small) is costed cheaper as
# a hash join over a sequential scan of every job than as one probe per transition, and
# a drain on a young table then reads all of it per acknowledgement (50-120 ms, where the
# probes take a few). The planner is told to probe: the statement's only sane plan. Sent
# before the acknowledgement in its own message, when that message is its own
# transaction; inside an open transaction (a caller's, where SET LOCAL would outlive the
# call, or the storage's own under server-side binding) the planner chooses.
PROBE_BY_INDEX = (
    "SET LOCAL enable_seqscan = off; SET LOCAL enable_hashjoin = off; "
    "SET LOCAL enable_mergejoin = off"
)

# Successes that wake their continuations: after the acknowledgement, in the same
# message (one transaction), the awaiting children of the parents now succeeded become
# enqueued and their queues are announced. A statement of its own, so that its snapshot
# is taken after the acknowledgement's: an enqueue fixes a continuation up under its
# parent's row lock (inserts.py), so either it committed before the acknowledgement
# could update the parent (and this snapshot sees the child), or it waits for this
# transaction and then sees the parent succeeded. Children of a parent whose fence
# failed stay awaiting (that parent is not succeeded).
WAKE = Statement(
    "wake",
    f"""
WITH woken AS (
    UPDATE {_JOBS} AS c SET state = {Code.ENQUEUED}, due_at = NULL
    FROM {_JOBS} AS p
    WHERE c.parent_id = ANY(%(parents)s::uuid[]) AND c.state = {Code.AWAITING}
      AND p.uuid = c.parent_id AND p.state = {Code.SUCCEEDED}
    RETURNING c.queue
)
SELECT pg_notify(%(channel)s, q.queue) FROM (SELECT DISTINCT queue FROM woken) AS q
""",
    {"parents": "uuid[]", "channel": "text"},
)

# Workflow steps' checkpoints (storage/orm/steps.py), one per chain of steps of an
# instance: the steps' jobs whose fence holds are locked, and each chain whose fences all
# hold has its instance replaced if that is unfinished and at the chain's expected
# revision, in one statement; each row answers a step by number: fenced, and whether its
# chain's instance moved.
CHECKPOINT = Statement(
    "checkpoint",
    f"""
WITH fenced AS (
    SELECT t.n, t.chain FROM {_JOBS} AS j
    JOIN unnest(%(ids)s::uuid[], %(workers)s::text[], %(attempts)s::integer[],
                %(chains)s::integer[])
         WITH ORDINALITY AS t (uuid, worker_id, attempt, chain, n)
      ON j.uuid = t.uuid AND j.worker_id = t.worker_id AND j.attempt = t.attempt
    WHERE j.state = {Code.PROCESSING}
    FOR UPDATE OF j
), whole AS (
    SELECT chain FROM fenced GROUP BY chain
    HAVING count(*) = (%(lengths)s::integer[])[chain]
), moved AS (
    UPDATE {_INSTANCES} AS i
    SET definition_id = c.definition_id, definition_version = c.definition_version,
        state = c.state, data = c.data, cursor = c.cursor,
        revision = c.expected + (%(lengths)s::integer[])[c.chain],
        tenant_id = c.tenant_id, created_at = c.created_at, updated_at = c.updated_at
    FROM unnest(%(instances)s::uuid[], %(expected)s::bigint[], %(definitions)s::text[],
                %(versions)s::integer[], %(states)s::smallint[], %(data)s::jsonb[],
                %(cursors)s::jsonb[], %(tenants)s::text[], %(created)s::timestamptz[],
                %(updated)s::timestamptz[])
         WITH ORDINALITY AS c (id, expected, definition_id, definition_version, state, data,
                               cursor, tenant_id, created_at, updated_at, chain)
    JOIN whole AS w ON w.chain = c.chain
    WHERE i.id = c.id AND i.revision = c.expected
      AND i.state NOT IN ({", ".join(map(str, sorted(tallies.TERMINAL_INSTANCE_CODES)))})
    RETURNING c.chain
)
SELECT f.n, m.chain IS NOT NULL FROM fenced AS f LEFT JOIN moved AS m ON m.chain = f.chain""",
    {
        "ids": "uuid[]",
        "workers": "text[]",
        "attempts": "integer[]",
        "chains": "integer[]",
        "lengths": "integer[]",
        "instances": "uuid[]",
        "expected": "bigint[]",
        "definitions": "text[]",
        "versions": "integer[]",
        "states": "smallint[]",
        "data": "jsonb[]",
        "cursors": "jsonb[]",
        "tenants": "text[]",
        "created": "timestamptz[]",
        "updated": "timestamptz[]",
    },
)

# The instances of a claimed batch's workflow steps, read by the worker right after a
# claim that holds any (engine/workflow/prefetch.py): one probe of the primary key each,
# JSON as text.
GET_INSTANCES = Statement(
    "get_instances",
    f"""
SELECT id, definition_id, definition_version, state, data, cursor, revision, tenant_id,
       created_at, updated_at
FROM {_INSTANCES} WHERE id = ANY(%(ids)s::uuid[])""",
    {"ids": "uuid[]"},
)

# Signals (storage/orm/workflows.py): for each wanted key, its oldest bookmarks not locked
# by a concurrent consumer, as many as the key is wanted, are locked, deleted and
# returned with their instances, in one statement.
TAKE_BOOKMARKS = Statement(
    "take_bookmarks",
    f"""
WITH wanted AS (
    SELECT signal_name, correlation_id, count(*) AS n
    FROM unnest(%(names)s::text[], %(correlations)s::text[]) AS w (signal_name, correlation_id)
    GROUP BY signal_name, correlation_id
), locked AS (
    SELECT b.id, b.signal_name, b.correlation_id, b.created_at FROM {_BOOKMARKS} AS b
    JOIN wanted AS w ON b.signal_name = w.signal_name AND b.correlation_id = w.correlation_id
    FOR UPDATE OF b SKIP LOCKED
), taken AS (
    SELECT r.id FROM (
        SELECT id, signal_name, correlation_id, row_number() OVER (
            PARTITION BY signal_name, correlation_id ORDER BY created_at, id) AS rank
        FROM locked
    ) AS r
    JOIN wanted AS w ON r.signal_name = w.signal_name AND r.correlation_id = w.correlation_id
    WHERE r.rank <= w.n
), deleted AS (
    DELETE FROM {_BOOKMARKS} AS b USING taken AS t WHERE b.id = t.id
    RETURNING b.id, b.instance_id, b.signal_name, b.correlation_id, b.payload_type,
              b.created_at
)
SELECT d.id, d.instance_id, d.signal_name, d.correlation_id, d.payload_type, d.created_at,
       i.definition_id, i.definition_version, i.state, i.data, i.cursor, i.revision,
       i.tenant_id, i.created_at, i.updated_at
FROM deleted AS d LEFT JOIN {_INSTANCES} AS i ON i.id = d.instance_id""",
    {"names": "text[]", "correlations": "text[]"},
)


# -- enqueue ---------------------------------------------------------------------------

# The batch travels as one JSON array of objects (keys left out are NULL) and is inserted
# in batch order in one statement, with the pg_notify of the enqueued jobs' queues, so
# the hint commits with the rows. A batch that claims idempotency scopes looks their
# active holders up in the statement's snapshot and inserts the rest; the final SELECT
# answers the held positions (a holder committed after the snapshot makes the INSERT hit
# the active-key index instead, and the call is replayed: its look-up then sees it). A
# large batch without scopes is copied in (COPY ... FROM STDIN) after its pg_notify, in a
# transaction: three more round trips, paid once per batch.
_INSERTED = [f for f in _FIELDS if not f.primary_key]
_INSERTED_COLUMNS = ", ".join(_q(f.attname) for f in _INSERTED)
# COPY takes its columns in any order, here as text written by copy_format.copy_lines:
# first each row's own values, then the rest, which the rows of a batch mostly share
# (queue, options, state, target, retry): those a record holds as they are stored, as one
# attrgetter reads them, then those converted (rows.job_values says how).
_PER_ROW = ["uuid", "created_at", "arguments", "result", "progress", "checkpoint"]
AS_STORED = [
    "queue", "priority", "timeout", "hard_timeout", "due_at", "worker_id", "lease_until",
    "attempt", "failures", "cancel_requested", "idempotency_key", "tenant_id", "parent_id",
    "requeued_from", "trace_parent", "recurring_id", "last_error", "finished_at",
    "workflow_instance_id", "activity_node_id", "expires_at", "started_at",
]  # fmt: skip
_CONVERTED = ["target", "state", "retry", "key_scope", "limited", "limits", "limit_key"]
_COPIED = _PER_ROW + AS_STORED + _CONVERTED
assert sorted(_COPIED) == sorted(f.attname for f in _INSERTED)
COPY = f"COPY {_JOBS} ({', '.join(_q(name) for name in _COPIED)}) FROM STDIN"
_INSERT_PLAIN = """
WITH inserted AS (
    INSERT INTO {jobs} ({columns})
    SELECT {columns} FROM jsonb_to_recordset(%(rows)s::jsonb) AS i ({typed})
)
SELECT pg_notify(%(channel)s, queue) FROM unnest(%(queues)s::text[]) AS queue
"""
_INSERT_KEYED = """
WITH input AS (
    SELECT * FROM jsonb_to_recordset(%(rows)s::jsonb) AS i ({typed}, n integer)
), held AS ({held}
), inserted AS (
    INSERT INTO {jobs} ({columns})
    SELECT {columns} FROM input AS i
    WHERE NOT EXISTS (SELECT FROM held WHERE held.n = i.n)
    ORDER BY n
    RETURNING queue, state
), notified AS (
    SELECT pg_notify(%(channel)s, q.queue)
    FROM (SELECT DISTINCT queue FROM inserted WHERE state = {enqueued}) AS q
)
SELECT n, holder FROM held
UNION ALL SELECT NULL, NULL FROM notified
"""
_HELD_BY_KEY = f"""
    SELECT i.n, j.uuid AS holder
    FROM input AS i JOIN {_JOBS} AS j
      ON j.tenant_id = i.tenant_id AND j.idempotency_key = i.idempotency_key
    WHERE j.idempotency_key IS NOT NULL AND j.state IN ({{active}})
    UNION ALL
    SELECT i.n, j.uuid
    FROM input AS i JOIN {_JOBS} AS j
      ON j.tenant_id IS NULL AND j.idempotency_key = i.idempotency_key
    WHERE i.tenant_id IS NULL AND j.idempotency_key IS NOT NULL AND j.state IN ({{active}})"""
_HELD_BY_SCOPE = f"""
    SELECT i.n, j.uuid AS holder
    FROM input AS i JOIN {_JOBS} AS j ON j.key_scope = i.key_scope
    WHERE j.key_scope IS NOT NULL"""
NOTIFY = "SELECT pg_notify(%s, queue) FROM unnest(%s::text[]) AS queue"
_INSERTS: dict[tuple[bool, bool], Statement] = {}


def _typed(connection: BaseDatabaseWrapper) -> str:
    """The inserted columns with their types (from the models, as PostgreSQL has them),
    as ``jsonb_to_recordset`` reads the JSON rows."""
    return ", ".join(f"{_q(f.attname)} {f.db_type(connection)}" for f in _INSERTED)


def insert_statement(connection: BaseDatabaseWrapper, *, keyed: bool, scoped: bool) -> Statement:
    """The enqueue statement (column types from the models, as PostgreSQL has them)."""
    statement = _INSERTS.get((keyed, scoped))
    if statement is None:
        typed = _typed(connection)
        held = (_HELD_BY_SCOPE if scoped else _HELD_BY_KEY).format(active=_ACTIVE)
        sql = (_INSERT_KEYED if keyed else _INSERT_PLAIN).format(
            jobs=_JOBS, columns=_INSERTED_COLUMNS, typed=typed, held=held, enqueued=Code.ENQUEUED
        )
        parameters = {"rows": "text", "channel": "text"}
        if not keyed:
            parameters["queues"] = "text[]"
        purpose = ("insert_scoped" if scoped else "insert_keyed") if keyed else "insert"
        statement = _INSERTS[keyed, scoped] = Statement(purpose, sql, parameters)
    return statement


# -- recurring fires -------------------------------------------------------------------

# A fire in one statement (job_storage.try_fire_recurring): the compare-and-set on the
# definition's due time with its overlap test (allowed, or the job of its last fire no
# longer active: one probe of the uuid index), and the insert of the occurrence's job (an
# enqueued one, claiming no idempotency scope) only if the compare-and-set took, with the
# pg_notify of its queue. One row answers a fire; none, a refusal, which the storage then
# tells apart (skip, hold or lost race) through the portable path.
_FIRE = """
WITH fired AS (
    UPDATE {recurring} AS r
    SET next_fire_time = %(following)s, last_fire_time = r.next_fire_time,
        fired_job_id = %(job)s, updated_at = %(now)s
    WHERE r.id = %(id)s AND r.enabled AND r.next_fire_time = %(expected)s
      AND (r.overlap = '{allow}' OR NOT EXISTS (
          SELECT FROM {jobs} AS j WHERE j.uuid = r.fired_job_id AND j.state IN ({active})))
    RETURNING r.id
), inserted AS (
    INSERT INTO {jobs} ({columns})
    SELECT {columns} FROM jsonb_to_recordset(%(rows)s::jsonb) AS i ({typed})
    WHERE EXISTS (SELECT FROM fired)
    RETURNING queue
)
SELECT pg_notify(%(channel)s, queue) FROM inserted
"""
# The recurring definitions due at a time, in due order (job_storage.get_due_recurring):
# enabled, their next fire time come, but for those whose overlap "queue" holds the
# occurrence back (the job of their last fire still active: one probe of the uuid index).
RECURRING_COLUMNS = [f.attname for f in Recurring._meta.concrete_fields]
assert all(f.attname == f.column for f in Recurring._meta.concrete_fields), "a column was renamed"
DUE_RECURRING = Statement(
    "due_recurring",
    f"""
SELECT {", ".join(f"r.{_q(name)}" for name in RECURRING_COLUMNS)}
FROM {_RECURRING} AS r
WHERE r.enabled AND r.next_fire_time <= %(now)s
  AND NOT (r.overlap = '{OverlapPolicy.QUEUE.value}' AND EXISTS (
      SELECT FROM {_JOBS} AS j WHERE j.uuid = r.fired_job_id AND j.state IN ({_ACTIVE})))
ORDER BY r.next_fire_time, r.id LIMIT %(limit)s""",
    {"now": "timestamptz", "limit": "integer"},
)


@cache
def _fire(typed: str) -> Statement:
    return Statement(
        "fire",
        _FIRE.format(
            recurring=_RECURRING,
            jobs=_JOBS,
            columns=_INSERTED_COLUMNS,
            typed=typed,
            allow=OverlapPolicy.ALLOW.value,
            active=_ACTIVE,
        ),
        {
            "following": "timestamptz",
            "job": "uuid",
            "now": "timestamptz",
            "id": "text",
            "expected": "timestamptz",
            "rows": "text",
            "channel": "text",
        },
    )


def fire_statement(connection: BaseDatabaseWrapper) -> Statement:
    """The one-statement fire (column types as :func:`insert_statement` has them)."""
    return _fire(_typed(connection))


# -- the scheduler's due work ----------------------------------------------------------

# Activation (job_storage.activate_due): the next LIMIT scheduled or failed jobs due by
# now, oldest due first, locked skipping rows another activator holds (the partial index
# millrace_job_due), become enqueued, and their queues are announced; answers how many.
ACTIVATE = Statement(
    "activate",
    f"""
WITH due AS (
    SELECT seq FROM {_JOBS}
    WHERE state IN ({_WAITING}) AND due_at <= %(now)s
    ORDER BY due_at, seq LIMIT %(limit)s
    FOR UPDATE SKIP LOCKED
), activated AS (
    UPDATE {_JOBS} AS j SET state = {Code.ENQUEUED}, due_at = NULL
    FROM due WHERE j.seq = due.seq
    RETURNING j.queue
), announced AS (
    SELECT pg_notify(%(channel)s, q.queue)
    FROM (SELECT DISTINCT queue FROM activated WHERE %(channel)s <> '') AS q
)
SELECT (SELECT count(*) FROM activated), (SELECT count(*) FROM announced)""",
    {"now": "timestamptz", "limit": "integer", "channel": "text"},
)

# The next due time after a time (job_storage.next_due_time): the heads of two index
# ranges, the waiting jobs' due times and the enabled definitions' next fire times.
DUE_HEADS = Statement(
    "due_heads",
    f"""
SELECT
    (SELECT due_at FROM {_JOBS} WHERE state IN ({_WAITING}) AND due_at > %(after)s
     ORDER BY due_at LIMIT 1),
    (SELECT next_fire_time FROM {_RECURRING} WHERE enabled AND next_fire_time > %(after)s
     ORDER BY next_fire_time LIMIT 1)""",
    {"after": "timestamptz"},
)
