"""PostgreSQL's hot statements, hand-written: a batch claim, a batch acknowledgement (which
also wakes continuations and announces them) and an enqueue (which also announces what it
enqueued), each one statement, so each runs alone in autocommit: one round trip.

Where the alias allows it, each is prepared once per database session (``PREPARE``, sent
with its first ``EXECUTE``), so a call pays neither parsing nor planning; see
:class:`PostgresHotPath`. A prepared statement is then sent on the driver's connection
without a Django cursor whenever nothing needs to see it (:func:`_sent_directly`), so a
call pays little Python either. Same contract as
:class:`~millrace_django.storage.orm.hotpath.OrmHotPath`; table and column names come from
the models, so the SQL follows the schema.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from functools import lru_cache
from itertools import batched
from operator import attrgetter
from typing import Any
from uuid import UUID

from django.db import DatabaseError, IntegrityError, connections
from django.db.backends.base.base import BaseDatabaseWrapper

from millrace_django.contract import (
    ACTIVE_JOB_STATES,
    ATTEMPT_HISTORY_CAP,
    TERMINAL_INSTANCE_STATES,
    BookmarkRecord,
    ClaimRequest,
    JobRecord,
    JobState,
    JobTransition,
    Limit,
    RetrySpec,
    WorkflowInstanceRecord,
    limits_json,
)
from millrace_django.contract.catalog import RUN_TIME_BOUNDS
from millrace_django.errors import DuplicateJobId
from millrace_django.models import (
    INSTANCE_STATE_CODES,
    INSTANCE_STATES,
    JOB_STATE_CODES,
    AttemptOutcomeCode,
    Bookmark,
    FinishedMinute,
    Job,
    JobAttempt,
    PausedQueue,
    RunMinute,
    Tally,
    TallySubject,
    WorkflowInstance,
    job_codes,
)
from millrace_django.models import JobStateCode as Code
from millrace_django.storage.orm import tallies
from millrace_django.storage.orm.context import Chain, OrmContext
from millrace_django.storage.orm.hotpath import OrmHotPath, claim_limited
from millrace_django.storage.orm.inserts import meets_holders
from millrace_django.storage.orm.rows import (
    JobRowReader,
    active_scope,
    arguments_text,
    job_values,
    limit_key,
    retry_json,
)
from millrace_django.storage.orm.transactions import InsertConflict
from millrace_django.storage.orm.vendors.postgresql import (
    LOST_PREPARED_STATEMENT,
    StatementTimeout,
)


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
_ACTIVE = job_codes(ACTIVE_JOB_STATES)
_FIELDS = list(Job._meta.concrete_fields)
# A row's values are keyed by field name (rows.job_values), which is its column name too.
assert all(f.attname == f.column for f in _FIELDS), "a Job column was renamed"
_CLAIMED = JobRowReader(
    known=("state", "worker_id", "lease_until", "finished_at", "result", "started_at")
)
"""Fields a claim sets (or, the job being active, knows to be NULL): not read back."""
_RETURNED = ", ".join(f"j.{_q(name)}" for name in [*_CLAIMED.columns, "seq"])  # seq: to sort


# -- prepared statements ---------------------------------------------------------------


class _Statement:
    """One hot statement: its SQL with ``%(name)s`` parameters, and the same SQL as a
    session's prepared statement (``$n`` parameters, typed) with its ``EXECUTE``."""

    def __init__(self, purpose: str, sql: str, parameters: Mapping[str, str]) -> None:
        self.sql = sql
        self.name = f"millrace_{purpose}_{hashlib.sha1(sql.encode()).hexdigest()[:10]}"
        body = sql
        for position, parameter in enumerate(parameters, start=1):
            body = body.replace(f"%({parameter})s", f"${position}")
        assert "%(" not in body, f"{purpose}: a parameter is not declared"
        types = ", ".join(parameters.values())
        self.prepare = f"PREPARE {self.name} ({types}) AS {body}"
        arguments = ", ".join(f"%({parameter})s" for parameter in parameters)
        self.execute = f"EXECUTE {self.name} ({arguments})"


class _Session:
    """What the hot path keeps for one driver connection (one database session): the
    names of the statements prepared there, and the driver cursor it sends them on."""

    __slots__ = ("_cursor", "prepared", "raw", "unsure")

    def __init__(self, raw: Any) -> None:
        self.raw = raw
        self.prepared: set[str] = set()
        self.unsure = False
        """Set when a message failed: the server runs none of a failed message's
        statements after the failing one, so which of its ``PREPARE``s ran is unknown,
        and the next call reads them back (believing one prepared that was not, or the
        reverse, made every later call fail, alternately one way and the other)."""
        self._cursor: Any = None

    def reread(self, connection: BaseDatabaseWrapper) -> None:
        """Take what the session has prepared from the server."""
        with connection.cursor() as cursor:
            cursor.execute("SELECT name FROM pg_prepared_statements")
            self.prepared = {name for (name,) in cursor.fetchall()}
        self.unsure = False

    def cursor(self, connection: BaseDatabaseWrapper) -> Any:
        """The session's driver cursor, made once as Django makes its own (with the time
        zone of the timestamps it reads): not one cursor, and adapters map, per call."""
        if self._cursor is None:
            self._cursor = connection.create_cursor()
        return self._cursor


def _session(connection: BaseDatabaseWrapper) -> _Session:
    """The hot path's state for ``connection``'s current session (a new driver connection
    starts afresh)."""
    raw = connection.connection
    session: _Session | None = getattr(connection, "_millrace_session", None)
    if session is None or session.raw is not raw:
        session = _Session(raw)
        setattr(connection, "_millrace_session", session)  # noqa: B010 (not a Django field)
    return session


def _sqlstate(error: DatabaseError) -> str | None:
    return getattr(error.__cause__, "sqlstate", None)


# -- sending ---------------------------------------------------------------------------


_PARAMETER = re.compile(r"%\((\w+)\)s")


@lru_cache(maxsize=64)
def _template(sql: str) -> str:
    """``sql`` with its ``%(name)s`` parameters as :meth:`str.format_map` fields."""
    return _PARAMETER.sub(r"{\1}", sql.replace("{", "{{").replace("}", "}}"))


def _literal(value: object) -> str:
    """``value`` as a quoted SQL literal where ``standard_conforming_strings`` is on (a
    backslash is a plain character): its text, read as the prepared statement's
    parameter type says."""
    if value is None:
        return "NULL"
    text = value.isoformat() if isinstance(value, datetime) else str(value)
    return "'" + text.replace("'", "''") + "'"


def _sent_directly(
    connection: BaseDatabaseWrapper,
    session: _Session,
    parts: Sequence[str],
    params: Mapping[str, Any],
    read: bool,
    trailing: int = 0,
) -> list[tuple[Any, ...]] | None:
    """The rows of the last of ``parts`` but ``trailing`` (if ``read``), sent with their
    parameters spelled as literals on ``session``'s driver cursor, as one simple query;
    errors are Django's.

    This skips what a Django cursor costs per call (a new driver cursor, the parameters'
    conversion by the driver, the execute-wrapper chain), so it is done only where nothing
    needs to see the statement: ``None`` (send it through Django's cursor) while Django
    logs queries, while an execute wrapper other than the storage call's
    :class:`StatementTimeout` watches, where the server reads literals otherwise, or for
    text the driver refuses (a NUL character).
    """
    if connection.queries_logged:
        return None
    timeout: StatementTimeout | None = None
    for wrapper in connection.execute_wrappers:
        if timeout is not None or not isinstance(wrapper, StatementTimeout):
            return None
        timeout = wrapper
    if session.raw.pgconn.parameter_status(b"standard_conforming_strings") != b"on":
        return None
    literals = {name: _literal(value) for name, value in params.items()}
    sql = "; ".join([_template(part).format_map(literals) for part in parts])
    if "\x00" in sql:
        return None
    if timeout is not None:
        sql = timeout.take(connection) + sql
    connection.validate_thread_sharing()
    connection.validate_no_broken_transaction()
    cursor = session.cursor(connection)
    with connection.wrap_database_errors:
        cursor.execute(sql)
        return _rows_of(cursor, trailing) if read else []


def _sent(
    connection: BaseDatabaseWrapper,
    parts: Sequence[str],
    params: Mapping[str, Any],
    read: bool,
    trailing: int = 0,
) -> list[tuple[Any, ...]]:
    """The rows of the last of ``parts`` but ``trailing`` (if ``read``), sent in one
    message through Django's cursor."""
    with connection.cursor() as cursor:
        cursor.execute("; ".join(parts), params)
        return _rows_of(cursor, trailing) if read else []


def _rows_of(cursor: Any, trailing: int) -> list[tuple[Any, ...]]:
    """The rows of the statement ``cursor`` ran ``trailing`` statements before its last.

    Whether a result has rows is read from its column count, not from
    ``cursor.description``, which builds a column object per column on every access
    (a tenth of a millisecond per claim, the job's two dozen columns)."""
    results: list[list[tuple[Any, ...]]] = []
    while True:
        result = cursor.pgresult
        results.append(cursor.fetchall() if result is not None and result.nfields else [])
        if not cursor.nextset():
            return results[-1 - trailing]


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
SELECT {", ".join(["NULL"] * (len(_CLAIMED.columns) + 1))}, true FROM waiting WHERE found
ORDER BY waiting, priority DESC, seq
"""
_CLAIM_PARAMETERS = {"limit": "integer", "now": "timestamptz", "worker": "text"}
_CLAIM_ONE_QUEUE = _Statement(
    "claim",
    _CLAIM.format(ready=_READY_ONE_QUEUE, queue_test="queue = %(queue)s"),
    {"queue": "text", **_CLAIM_PARAMETERS, "until": "timestamptz"},
)
_CLAIM_QUEUES = _Statement(
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
_COMPLETE = _Statement(
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
_PROBE_BY_INDEX = (
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
_WAKE = _Statement(
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
_CHECKPOINT = _Statement(
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

# Signals (storage/orm/workflows.py): for each wanted key, its oldest bookmarks not locked
# by a concurrent consumer, as many as the key is wanted, are locked, deleted and
# returned with their instances, in one statement.
_TAKE_BOOKMARKS = _Statement(
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
# COPY takes its columns in any order, here as text written by _copy_lines: first each
# row's own values, then the rest, which the rows of a batch mostly share (queue, options,
# state, target, retry): those a record holds as they are stored, as one attrgetter reads
# them, then those converted (rows.job_values says how).
_PER_ROW = ["uuid", "created_at", "arguments", "result", "progress", "checkpoint"]
_AS_STORED = [
    "queue", "priority", "timeout", "hard_timeout", "due_at", "worker_id", "lease_until",
    "attempt", "failures", "cancel_requested", "idempotency_key", "tenant_id", "parent_id",
    "requeued_from", "trace_parent", "recurring_id", "last_error", "finished_at",
    "workflow_instance_id", "activity_node_id", "expires_at", "started_at",
]  # fmt: skip
_CONVERTED = ["target", "state", "retry", "key_scope", "limited", "limits", "limit_key"]
_COPIED = _PER_ROW + _AS_STORED + _CONVERTED
assert sorted(_COPIED) == sorted(f.attname for f in _INSERTED)
_shared = attrgetter(*_AS_STORED, "invocation.target", "state", "retry", "limits")
_COPY = f"COPY {_JOBS} ({', '.join(_q(name) for name in _COPIED)}) FROM STDIN"
_COPY_CHUNK = 200
"""Rows sent at a time: the server reads a chunk while the next one is written."""
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
_NOTIFY = "SELECT pg_notify(%s, queue) FROM unnest(%s::text[]) AS queue"
COPY_AT_LEAST = 500
"""Batches of this many jobs or more, claiming no idempotency scope, are copied in."""

_ACTIVE_KEY = "millrace_job_active_key"
_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", re.I)
_INSERTS: dict[tuple[bool, bool], _Statement] = {}


def _insert_statement(connection: BaseDatabaseWrapper, *, keyed: bool, scoped: bool) -> _Statement:
    """The enqueue statement (column types from the models, as PostgreSQL has them)."""
    statement = _INSERTS.get((keyed, scoped))
    if statement is None:
        typed = ", ".join(f"{_q(f.attname)} {f.db_type(connection)}" for f in _INSERTED)
        held = (_HELD_BY_SCOPE if scoped else _HELD_BY_KEY).format(
            active=", ".join(str(code) for code in _ACTIVE)
        )
        sql = (_INSERT_KEYED if keyed else _INSERT_PLAIN).format(
            jobs=_JOBS, columns=_INSERTED_COLUMNS, typed=typed, held=held, enqueued=Code.ENQUEUED
        )
        parameters = {"rows": "text", "channel": "text"}
        if not keyed:
            parameters["queues"] = "text[]"
        purpose = ("insert_scoped" if scoped else "insert_keyed") if keyed else "insert"
        statement = _INSERTS[keyed, scoped] = _Statement(purpose, sql, parameters)
    return statement


def _json_value(value: object) -> object:
    """What :func:`json.dumps` cannot write itself, as PostgreSQL reads it."""
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, timedelta):
        return f"{value.days} days {value.seconds} seconds {value.microseconds} microseconds"
    return str(value)  # UUID


_encode_rows = json.JSONEncoder(default=_json_value, separators=(",", ":")).encode
_encode_json = json.JSONEncoder().encode  # as JSONField stores a value


@lru_cache(maxsize=64)
def _retry_text(retry: RetrySpec) -> str:
    """A retry policy as stored (most jobs share a few policies)."""
    return _encode_json(retry_json(retry))


def _limits_text(limits: tuple[Limit, ...]) -> str | None:
    """Limits as stored (a job carries the few its function and queue give)."""
    return None if not limits else _encode_json(limits_json(limits))


def _plain_array(values: Sequence[object]) -> str:
    """A PostgreSQL array literal of values whose text needs no quoting (numbers, ISO
    timestamps, booleans as ``t``/``f``)."""
    return "{" + ",".join(map(str, values)) + "}"


def _uuid_array(ids: Sequence[UUID]) -> str:
    """A ``uuid[]`` literal, each id as its 32 hex digits: PostgreSQL reads that form as
    well as the hyphenated one, which takes Python five times longer to write."""
    return "{" + ",".join([id_.hex for id_ in ids]) + "}"


def _quoted_array(values: Sequence[str | None]) -> str:
    """A PostgreSQL array literal of strings, each quoted (``None`` is NULL)."""
    quoted = {
        value: '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
        for value in set(values)
        if value is not None
    }
    return "{" + ",".join("NULL" if value is None else quoted[value] for value in values) + "}"


def _insert_error(error: IntegrityError, jobs: Sequence[JobRecord]) -> Exception:
    """What a unique violation of an enqueue means: a holder of a key that committed
    after the statement's snapshot (replay the call: its look-up will see it), or a
    stored job id (the first the insert met, in batch order)."""
    diag = getattr(error.__cause__, "diag", None)
    unique = getattr(error.__cause__, "sqlstate", None) == "23505"
    if unique and diag is not None and diag.constraint_name != _ACTIVE_KEY:
        ids = {job.id for job in jobs}
        for found in _UUID.findall(diag.message_detail or ""):
            if UUID(found) in ids:
                return DuplicateJobId(UUID(found))
    return InsertConflict(str(error))


def _copies(jobs: Sequence[JobRecord]) -> bool:
    """Whether ``jobs`` are copied in: many, none claiming a scope (few have a key)."""
    return len(jobs) >= COPY_AT_LEAST and not any(
        active_scope(job) for job in jobs if job.idempotency_key is not None
    )


def complete_parameters(
    transitions: Sequence[JobTransition], now: datetime, channel: str = ""
) -> dict[str, Any]:
    """The parameters of the acknowledgement of ``transitions`` (successes finished by
    ``now`` unless they say when; a limited job's queue hinted on ``channel``, none if
    empty: its slot is free). Array literals built here, as for every array parameter of
    this module: the driver's per-element list adaptation costs several times more."""
    return {
        "channel": channel,
        "ids": _uuid_array([t.job_id for t in transitions]),
        "workers": _quoted_array([t.expected_worker_id for t in transitions]),
        "attempts": _plain_array([t.expected_attempt for t in transitions]),
        "failures": _plain_array([t.failures for t in transitions]),
        "finished": _plain_array([(t.finished_at or now).isoformat() for t in transitions]),
        "results": _quoted_array(
            [None if t.result is None else _encode_json(t.result) for t in transitions]
        ),
    }


def checkpoint_parameters(chains: Sequence[Chain]) -> dict[str, Any]:
    """The parameters of :data:`_CHECKPOINT`: each step's fence and chain, and each
    chain's checkpoint."""
    steps = [t for chain in chains for t in chain.steps]
    checkpoints = [chain.checkpoint for chain in chains]
    instances = [c.instance for c in checkpoints]
    return {
        "ids": _uuid_array([t.job_id for t in steps]),
        "workers": _quoted_array([t.expected_worker_id for t in steps]),
        "attempts": _plain_array([t.expected_attempt for t in steps]),
        "chains": _plain_array([n for n, chain in enumerate(chains, 1) for _ in chain.steps]),
        "lengths": _plain_array([len(chain.steps) for chain in chains]),
        "instances": _uuid_array([i.id for i in instances]),
        "expected": _plain_array([c.expected_revision for c in checkpoints]),
        "definitions": _quoted_array([i.definition_id for i in instances]),
        "versions": _plain_array([i.definition_version for i in instances]),
        "states": _plain_array([INSTANCE_STATE_CODES[i.state] for i in instances]),
        "data": _quoted_array([_encode_json(i.data) for i in instances]),
        "cursors": _quoted_array([_encode_json(i.cursor) for i in instances]),
        "tenants": _quoted_array([i.tenant_id for i in instances]),
        "created": _plain_array([i.created_at.isoformat() for i in instances]),
        "updated": _plain_array([i.updated_at.isoformat() for i in instances]),
    }


def _instance_of(instance_id: UUID, columns: Sequence[Any]) -> WorkflowInstanceRecord:
    """An instance from the columns :data:`_TAKE_BOOKMARKS` reads (JSON as text)."""
    definition_id, version, state, data, cursor, revision, tenant, created, updated = columns
    return WorkflowInstanceRecord(
        id=instance_id,
        definition_id=definition_id,
        definition_version=version,
        state=INSTANCE_STATES[state],
        data=None if data is None else json.loads(data),
        cursor=None if cursor is None else json.loads(cursor),
        revision=revision,
        tenant_id=tenant,
        created_at=created,
        updated_at=updated,
    )


# -- the hot path ----------------------------------------------------------------------


class PostgresHotPath:
    """One statement, one round trip, per batch claim, batch acknowledgement and enqueue.

    ``several_statements``: one ``cursor.execute`` may carry several statements (client-
    side binding, Django's default). ``prepare``: hot statements are prepared once per
    session and then only executed; off where the alias says a transaction-mode pooler
    may hand us another server connection at any time (``DISABLE_SERVER_SIDE_CURSORS``,
    what Django's documentation has such deployments set), and without
    ``several_statements``. A session that lost a statement we prepared there
    (:data:`LOST_PREPARED_STATEMENT`) is read back from the server, and the call replayed.
    """

    claim_is_one_statement = True

    def __init__(self, *, several_statements: bool = True, prepare: bool = True) -> None:
        self.several_statements = several_statements
        self.prepare = prepare and several_statements
        self._limited_waiting: dict[frozenset[str], bool] = {}
        """Per set of queues claimed: whether the last claim saw limited jobs waiting."""

    def complete_is_one_statement(
        self, ctx: OrmContext, transitions: Sequence[JobTransition]
    ) -> bool:
        if not any(t.activate_continuations for t in transitions):
            return True
        return ctx.notify_channel is not None and self.several_statements

    def insert_is_one_statement(self, ctx: OrmContext, jobs: Sequence[JobRecord]) -> bool:
        return ctx.notify_channel is not None and not _copies(jobs) and not meets_holders(jobs)

    # -- statements ---------------------------------------------------------------------

    def _run(
        self,
        connection: BaseDatabaseWrapper,
        statement: _Statement,
        params: Mapping[str, Any],
        before: str = "",
        after: _Statement | None = None,
        *,
        read: bool = True,
    ) -> list[tuple[Any, ...]]:
        """The rows of ``statement`` (if ``read``: reading them costs), run after
        ``before`` and before ``after`` (in the same message where messages can carry
        several statements). A prepared statement is sent on the driver's connection
        directly where nothing else needs to see it (:func:`_sent_directly`): its
        parameters' types are the statement's own."""
        statements = [statement] if after is None else [statement, after]
        if not self.several_statements:
            with connection.cursor() as cursor:
                if before:
                    cursor.execute(before, params)
                cursor.execute(statement.sql, params)
                rows: list[tuple[Any, ...]] = cursor.fetchall() if read else []
                if after is not None:
                    cursor.execute(after.sql, params)
                return rows
        if not self.prepare:
            parts = [before] if before else []
            parts += [sent.sql for sent in statements]
            return _sent(connection, parts, params, read, trailing=len(statements) - 1)
        connection.close_if_health_check_failed()  # as Django does before a cursor
        connection.ensure_connection()
        session = _session(connection)
        if session.unsure:
            session.reread(connection)
        parts = [before] if before else []
        trailing = 0  # statements after ``statement``'s EXECUTE
        preparing = False
        for sent in statements:
            if sent.name not in session.prepared:
                session.prepared.add(sent.name)  # PREPARE is not undone by a rollback
                parts.append(sent.prepare)
                preparing = True
                trailing += sent is not statement
            parts.append(sent.execute)
            trailing += sent is not statement
        try:
            direct = _sent_directly(connection, session, parts, params, read, trailing)
            return (
                direct if direct is not None else _sent(connection, parts, params, read, trailing)
            )
        except DatabaseError as error:
            # A duplicate (42P05) can only come from a PREPARE, so ``preparing`` covers it.
            if preparing or _sqlstate(error) == LOST_PREPARED_STATEMENT:
                session.unsure = True
            raise

    # -- claim --------------------------------------------------------------------------

    def claim(self, ctx: OrmContext, request: ClaimRequest) -> list[JobRecord]:
        """Limited jobs first, in a transaction of their own, when the last claim of these
        queues saw some waiting; then the one plain statement for the room left, which
        says whether limited jobs wait; if they do and this claim has not looked yet, the
        limited claim follows at once (no poll's delay). Without limited jobs, a claim
        stays the one plain statement."""
        looked = self._limited_waiting.get(request.queues, False)
        claimed = ctx.tx.write(lambda: claim_limited(ctx, request)) if looked else []
        room = request.max_count - len(claimed)
        if not room:
            return claimed
        plain, waiting = self._claim_plain(ctx, replace(request, max_count=room))
        self._limited_waiting[request.queues] = waiting
        claimed += plain
        room -= len(plain)
        if waiting and not looked and room:
            more = replace(request, max_count=room)
            claimed += ctx.tx.write(lambda: claim_limited(ctx, more))
        return claimed

    def _claim_plain(self, ctx: OrmContext, request: ClaimRequest) -> tuple[list[JobRecord], bool]:
        """The jobs without limits the claim statement leased, and whether jobs with
        limits wait in the queues."""
        now = ctx.clock.now()
        params: dict[str, Any] = {
            "limit": request.max_count,
            "now": now,
            "worker": request.worker_id,
            "until": now + request.lease,
        }
        if len(request.queues) == 1:
            (params["queue"],) = request.queues
            statement = _CLAIM_ONE_QUEUE
        else:
            params["queues"] = _quoted_array(sorted(request.queues))
            statement = _CLAIM_QUEUES
        rows = self._run(connections[ctx.alias], statement, params)
        waiting = bool(rows) and rows[-1][-1] is True
        if waiting:
            rows.pop()
        read = _CLAIMED.read
        known = {
            "state": JobState.PROCESSING,
            "worker_id": request.worker_id,
            "lease_until": params["until"],
            "finished_at": None,
            "result": None,
            "started_at": now,
        }
        return [read(row, known) for row in rows], waiting

    # -- acknowledgement ----------------------------------------------------------------

    def complete(self, ctx: OrmContext, transitions: Sequence[JobTransition]) -> list[bool]:
        channel = ctx.notify_channel
        parents = [t.job_id for t in transitions if t.activate_continuations]
        if parents and channel is None:
            return OrmHotPath().complete(ctx, transitions)
        connection = connections[ctx.alias]
        params = complete_parameters(transitions, ctx.clock.now(), channel or "")
        before = "" if connection.in_atomic_block else _PROBE_BY_INDEX
        wake = None
        if parents:
            params["parents"] = _uuid_array(parents)
            wake = _WAKE
        rows = self._run(connection, _COMPLETE, params, before, wake)
        won = {n for (n,) in rows}
        return [n in won for n in range(1, len(transitions) + 1)]

    def checkpoint(self, ctx: OrmContext, chains: Sequence[Chain]) -> list[bool | None]:
        connection = connections[ctx.alias]
        rows = self._run(connection, _CHECKPOINT, checkpoint_parameters(chains))
        answers: list[bool | None] = [False] * sum(len(chain.steps) for chain in chains)
        for n, moved in rows:
            answers[n - 1] = True if moved else None
        ended: Counter[Any] = Counter()
        first = 0
        for chain in chains:
            instance = chain.checkpoint.instance
            if answers[first] and instance.state in TERMINAL_INSTANCE_STATES:
                code = INSTANCE_STATE_CODES[instance.state]
                ended.update(
                    tallies.instance_ended(code, instance.definition_id, instance.tenant_id)
                )
            first += len(chain.steps)
        if ended:
            ctx.tx.tally(ended)
        return answers

    def take_bookmarks(
        self, ctx: OrmContext, wanted: Sequence[tuple[str, str]]
    ) -> tuple[list[BookmarkRecord], dict[UUID, WorkflowInstanceRecord]] | None:
        params = {
            "names": _quoted_array([name for name, _ in wanted]),
            "correlations": _quoted_array([correlation for _, correlation in wanted]),
        }
        taken: list[BookmarkRecord] = []
        instances: dict[UUID, WorkflowInstanceRecord] = {}
        for row in self._run(connections[ctx.alias], _TAKE_BOOKMARKS, params):
            bookmark_id, instance_id, name, correlation, payload_type, created_at = row[:6]
            taken.append(
                BookmarkRecord(
                    id=bookmark_id,
                    instance_id=instance_id,
                    signal_name=name,
                    correlation_id=correlation,
                    payload_type=payload_type,
                    created_at=created_at,
                )
            )
            if row[6] is not None:
                instances[instance_id] = _instance_of(instance_id, row[6:])
        return taken, instances

    # -- enqueue ------------------------------------------------------------------------

    def insert(self, ctx: OrmContext, jobs: Sequence[JobRecord]) -> list[UUID] | None:
        """Insert ``jobs`` (none of them awaiting a parent) with enqueue semantics."""
        channel = ctx.notify_channel
        if channel is None or meets_holders(jobs):
            return None
        connection = connections[ctx.alias]
        try:
            if _copies(jobs) and connection.in_atomic_block:
                self._copy(ctx, connection, channel, jobs)
                return [job.id for job in jobs]
            return self._insert(ctx, connection, channel, jobs)
        except IntegrityError as error:
            raise _insert_error(error, jobs) from error

    def _insert(
        self,
        ctx: OrmContext,
        connection: BaseDatabaseWrapper,
        channel: str,
        jobs: Sequence[JobRecord],
    ) -> list[UUID]:
        effective: list[UUID | None] = []
        first_holder: dict[str, int] = {}  # scope -> position of its first job in the batch
        rows: list[dict[str, Any]] = []
        sent: list[int] = []  # batch position of each row
        queues: set[str] = set()
        for position, job in enumerate(jobs):
            scope = active_scope(job)
            if scope is not None:
                if scope in first_holder:  # the batch repeats a scope: the first holds it
                    effective.append(None)
                    continue
                first_holder[scope] = position
            values = job_values(job, track_scope=ctx.track_scope)
            rows.append({name: value for name, value in values.items() if value is not None})
            sent.append(position)
            effective.append(job.id)
            if job.state is JobState.ENQUEUED:
                queues.add(job.queue)
        keyed = bool(first_holder)
        if keyed:  # number every row: the look-up answers by number
            for n, row in enumerate(rows):
                row["n"] = n
        statement = _insert_statement(connection, keyed=keyed, scoped=ctx.track_scope)
        params = {
            "rows": _encode_rows(rows),
            "channel": channel,
            "queues": _quoted_array(sorted(queues)),
        }
        for n, holder in self._run(connection, statement, params, read=keyed):
            if n is not None:
                effective[sent[n]] = holder
        for position, job in enumerate(jobs):
            if effective[position] is None:
                effective[position] = effective[first_holder[active_scope(job) or ""]]
        return [job_id for job_id in effective if job_id is not None]

    def _copy(
        self,
        ctx: OrmContext,
        connection: BaseDatabaseWrapper,
        channel: str,
        jobs: Sequence[JobRecord],
    ) -> None:
        queues = sorted({job.queue for job in jobs if job.state is JobState.ENQUEUED})
        with connection.cursor() as cursor:
            # First, so that it also carries the transaction's statement timeout.
            cursor.execute(_NOTIFY, [channel, _quoted_array(queues)])
            with connection.wrap_database_errors, cursor.cursor.copy(_COPY) as copy:
                for chunk in batched(_copy_lines(jobs, ctx.track_scope), _COPY_CHUNK):
                    copy.write("".join(chunk))


# -- COPY's text format ------------------------------------------------------------------

_NULL = "\\N"


def _copy_text(text: str) -> str:
    """``text`` as COPY reads it back: backslash, tab, newline and carriage return escaped."""
    return text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")


def _copy_value(value: object) -> str:
    """A value stored as it is, as COPY reads it: the text of the JSON rows of
    :meth:`PostgresHotPath._insert` (see :func:`_json_value`)."""
    if value is None:
        return _NULL
    if isinstance(value, str):
        return _copy_text(value)
    if isinstance(value, bool):
        return "t" if value else "f"
    if isinstance(value, int):
        return str(value)
    return str(_json_value(value))


class _Escaped(dict[str, str]):
    """Texts as COPY reads them, each distinct one escaped once (the jobs of a batch
    mostly share their target, retry policy, arguments)."""

    def __missing__(self, text: str) -> str:
        escaped = self[text] = _copy_text(text)
        return escaped


def _copy_lines(jobs: Sequence[JobRecord], track_scope: bool) -> Iterator[str]:
    """The rows of ``jobs`` in COPY's text format, in ``_COPY``'s column order: what
    :func:`job_values` stores. The columns rows share are written once per run of rows
    whose values are equal."""
    escaped = _Escaped()
    previous: object = None
    shared_text = ""
    for job in jobs:
        shared = _shared(job)
        if shared != previous:
            *stored, target, state, retry, limits = shared
            scope = active_scope(job) if track_scope else None
            texts = [escaped[target], str(JOB_STATE_CODES[state]), escaped[_retry_text(retry)]]
            limited = [
                _copy_value(bool(limits)),
                _copy_value(_limits_text(limits)),
                _copy_value(limit_key(limits)),
            ]
            previous, shared_text = (
                shared,
                "\t".join([*map(_copy_value, stored), *texts, _copy_value(scope), *limited]),
            )
        result, progress, checkpoint = job.result, job.progress, job.checkpoint
        yield (
            f"{job.id.hex}\t{job.created_at.isoformat()}\t"
            f"{escaped[arguments_text(job.invocation)]}\t"
            f"{_NULL if result is None else escaped[_encode_json(result)]}\t"
            f"{_NULL if progress is None else escaped[_encode_json(progress)]}\t"
            f"{_NULL if checkpoint is None else escaped[_encode_json(checkpoint)]}\t{shared_text}\n"
        )
