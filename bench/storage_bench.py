"""Storage benchmark: ``DjangoStorage`` on PostgreSQL (see bench/README.md).

Creates a dedicated database on the server named by ``MILLRACE_TEST_POSTGRES_URL``,
migrates it, measures enqueue, claim + apply_many and claim latency against a growing
pile of finished rows, prints the figures (and the SQL statements and round trips each
call costs), then drops the database. Nothing is asserted: targets are reported as met or
not. Every loop is bounded in count and in time.

    make bench                                         # starts and stops its own servers
    eval "$(scripts/testdb.sh start)"; .venv/bin/python bench/storage_bench.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import psycopg
from pgserver import DURABILITY, admin_connection, server_url
from psycopg import sql as pgsql

from millrace_django.clock import SystemClock
from millrace_django.conformance.support import make_job, succeed
from millrace_django.contract import ClaimRequest, JobRecord

REPO = Path(__file__).resolve().parent.parent
ALIAS = "bench"
QUEUE = "default"
WORKER = "bench-worker"
LEASE = timedelta(minutes=5)
ENQUEUED_CODE, SUCCEEDED_CODE = 1, 3  # millrace_django.models.JobStateCode
TERMINAL_CODES = (3, 5, 6)  # succeeded, dead, cancelled


@dataclass(frozen=True)
class Sizes:
    """How much work each scenario does; ``cap`` bounds each timed loop in seconds."""

    single: int
    batched_total: int
    batch: int
    one_batch: int
    drain: int
    latency_claims: int
    latency_warmup: int
    backlog: int
    big_backlog: int
    finished_steps: tuple[int, ...]
    seed_chunk: int
    cap: float
    seed_cap: float


FULL = Sizes(
    single=2_000,
    batched_total=10_000,
    batch=1_000,
    one_batch=10_000,
    drain=5_000,
    latency_claims=200,
    latency_warmup=20,
    backlog=1_000,
    big_backlog=100_000,
    finished_steps=(0, 100_000, 1_000_000),
    seed_chunk=100_000,
    cap=60.0,
    seed_cap=180.0,
)
QUICK = Sizes(
    single=200,
    batched_total=2_000,
    batch=500,
    one_batch=2_000,
    drain=300,
    latency_claims=50,
    latency_warmup=5,
    backlog=200,
    big_backlog=10_000,
    finished_steps=(0, 20_000),
    seed_chunk=20_000,
    cap=8.0,
    seed_cap=15.0,
)


class BenchError(RuntimeError):
    """The provider answered something a benchmark loop cannot go on with."""


# --------------------------------------------------------------------------- results


@dataclass
class Tally:
    statements: int = 0
    seconds: float = 0.0


@dataclass
class Rate:
    scenario: str
    jobs: int
    seconds: float
    calls: int
    statements: int
    execute_seconds: float
    capped: bool = False
    detail: str = ""

    @property
    def per_second(self) -> float:
        return self.jobs / self.seconds if self.seconds else 0.0


@dataclass
class Latency:
    finished_rows: int
    ready_backlog: int
    claims: int
    p50_ms: float
    p99_ms: float
    mean_ms: float
    capped: bool = False


@dataclass
class Profile:
    """The SQL one storage call sent: statements (Django's execute_wrapper) and protocol
    round trips (libpq's trace: every Query or Sync message, BEGIN and COMMIT included)."""

    call: str
    statements: list[str] = field(default_factory=list)
    params: list[Any] = field(default_factory=list, repr=False)
    round_trips: int | None = None
    wire: list[str] = field(default_factory=list)


@dataclass
class Report:
    machine: dict[str, Any] = field(default_factory=dict)
    versions: dict[str, Any] = field(default_factory=dict)
    rates: list[Rate] = field(default_factory=list)
    latencies: list[Latency] = field(default_factory=list)
    profiles: list[Profile] = field(default_factory=list)
    fence_check: dict[str, Any] = field(default_factory=dict)
    explains: dict[str, str] = field(default_factory=dict)
    targets: list[dict[str, Any]] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        data = asdict(self)
        for rate, entry in zip(self.rates, data["rates"], strict=True):
            entry["jobs_per_second"] = round(rate.per_second, 1)
        for entry in data["profiles"]:
            entry.pop("params", None)
            entry["statements"] = [text[:2_000] for text in entry["statements"]]
        return data


# --------------------------------------------------------------------------- set-up


def create_database(url: str, name: str) -> None:
    with admin_connection(url) as conn:
        conn.execute(
            pgsql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(pgsql.Identifier(name))
        )
        conn.execute(pgsql.SQL("CREATE DATABASE {}").format(pgsql.Identifier(name)))


def drop_database(url: str, name: str) -> None:
    with admin_connection(url) as conn:
        conn.execute(
            pgsql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(pgsql.Identifier(name))
        )


def setup_django(url: str, name: str) -> None:
    """Add the bench database as an alias of the test project, before Django starts."""
    sys.path.insert(0, str(REPO))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
    from django.conf import settings

    parts = urlsplit(url)
    settings.DATABASES[ALIAS] = {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": name,
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": parts.hostname or "127.0.0.1",
        "PORT": str(parts.port or ""),
    }
    settings.DEBUG = False  # no query log: measure the provider, not Django's debug cursor

    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", "millrace_django", database=ALIAS, verbosity=0)


# --------------------------------------------------------------------------- probes


def cursor_execute(statement: str, params: Any = None) -> list[tuple[Any, ...]]:
    from django.db import connections

    with connections[ALIAS].cursor() as cursor:
        cursor.execute(statement, params)
        return list(cursor.fetchall()) if cursor.description else []


@contextmanager
def counting() -> Iterator[Tally]:
    """Count the statements sent on the driver cursors Django makes for PostgreSQL and the
    time spent inside their ``execute`` (cheap enough for timed loops). Counted at the
    driver, not with an execute wrapper: the hot path sends its statements on the driver's
    cursor directly unless such a wrapper watches, so one would time the other path."""
    from django.db.backends.postgresql.base import Cursor, ServerBindingCursor

    tally = Tally()
    kinds: tuple[Any, ...] = (Cursor, ServerBindingCursor)
    originals = {kind: kind.execute for kind in kinds}

    def counted(original: Callable[..., Any]) -> Callable[..., Any]:
        def execute(self: Any, *args: Any, **kwargs: Any) -> Any:
            tally.statements += 1
            start = time.perf_counter()
            try:
                return original(self, *args, **kwargs)
            finally:
                tally.seconds += time.perf_counter() - start

        return execute

    for kind, original in originals.items():
        kind.execute = counted(original)
    try:
        yield tally
    finally:
        for kind, original in originals.items():
            kind.execute = original


def profile(call: str, action: Callable[[], Any]) -> tuple[Profile, Any]:
    """Run ``action`` once, recording its statements and its round trips on the wire."""
    from django.db import connections

    connection = connections[ALIAS]
    connection.ensure_connection()
    result = Profile(call)

    def record(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        result.statements.append(sql)
        result.params.append(params)
        return execute(sql, params, many, context)

    pgconn = connection.connection.pgconn
    fd, path = tempfile.mkstemp(prefix="millrace-bench-trace-")
    try:
        pgconn.trace(os.dup(fd))  # libpq keeps (and never closes) its FILE*; give it a dup
        pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS)
        try:
            with connection.execute_wrapper(record):
                value = action()
        finally:
            pgconn.untrace()
        with open(path, encoding="utf-8", errors="replace") as trace:
            messages = _trace_messages(trace.read())
    finally:
        os.close(fd)
        os.unlink(path)
    sent = [(kind, body) for direction, kind, body in messages if direction == "F"]
    result.round_trips = sum(1 for kind, _ in sent if kind in ("Query", "Sync"))
    result.wire = [_wire_label(body) for kind, body in sent if kind in ("Query", "Parse")]
    return result, value


def _trace_messages(trace: str) -> list[tuple[str, str, str]]:
    """(direction, message type, body) of each message in a libpq trace; a query's own
    newlines continue the message on the next lines."""
    messages: list[tuple[str, str, str]] = []
    for line in trace.splitlines():
        parts = line.split("\t", 3)
        if len(parts) >= 3 and parts[0] in ("F", "B") and parts[1].isdigit():
            messages.append((parts[0], parts[2].strip(), parts[3] if len(parts) > 3 else ""))
        elif messages:
            direction, kind, body = messages[-1]
            messages[-1] = (direction, kind, body + "\n" + line)
    return messages


def _wire_label(body: str) -> str:
    """``BEGIN``, ``COMMIT`` or the first words of each statement of a traced message."""
    statements = [part for part in body.strip().strip('"').split(";") if part.strip()]
    if len(statements) > 1:
        return "; ".join(_statement_words(part) for part in statements)
    return _statement_words(body)


def _statement_words(body: str) -> str:
    words = body.replace('"', " ").replace("(", " ").split()
    if words[:2] == ["SET", "LOCAL"] and len(words) > 2:
        return f"SET LOCAL {words[2]}"
    if words and words[0].upper() == "SELECT" and len(words) > 1:
        return f"SELECT {words[1]}"
    if words and words[0].upper() in ("WITH", "INSERT", "UPDATE", "DELETE") and len(words) > 2:
        return " ".join(words[:3])
    return words[0] if words else "?"


def statement_label(sql: str) -> str:
    text = " ".join(sql.split())
    if "PREPARE millrace_" in text and "; EXECUTE millrace_" in text:
        text = text[text.index("; EXECUTE millrace_") + 2 :]
        return "PREPARE + " + text[:58] + ("..." if len(text) > 58 else "")
    if text.startswith("SELECT set_config"):
        return "set_config(statement_timeout)"
    if text.startswith("SELECT FROM") and "FOR UPDATE;" in text:
        text = text[text.index("FOR UPDATE;") + len("FOR UPDATE;") :].strip()
        return "lock parents; " + text[:56] + ("..." if len(text) > 56 else "")
    return text[:70] + ("..." if len(text) > 70 else "")


def new_storage() -> Any:
    from millrace_django.storage.orm import DjangoStorage

    return DjangoStorage(ALIAS, SystemClock())


def empty_tables() -> None:
    from millrace_django.models import Job, JobAttempt, JobLog, JobTag

    tables = ", ".join(m._meta.db_table for m in (JobAttempt, JobLog, JobTag, Job))
    cursor_execute(f"TRUNCATE {tables} RESTART IDENTITY")


def vacuum_analyze() -> None:
    from millrace_django.models import Job

    cursor_execute(f"VACUUM (ANALYZE) {Job._meta.db_table}")


def request(max_count: int) -> ClaimRequest:
    return ClaimRequest(
        worker_id=WORKER, queues=frozenset({QUEUE}), max_count=max_count, lease=LEASE
    )


def jobs(clock: SystemClock, count: int) -> list[JobRecord]:
    return [make_job(clock, queue=QUEUE) for _ in range(count)]


def enqueue_backlog(storage: Any, clock: SystemClock, count: int, batch: int = 1_000) -> None:
    for start in range(0, count, batch):
        storage.enqueue(jobs(clock, min(batch, count - start)))


def ack(storage: Any, clock: SystemClock, claimed: list[JobRecord]) -> None:
    outcomes = storage.apply_many([succeed(job, clock) for job in claimed])
    if not all(outcome is True for outcome in outcomes):
        raise BenchError(f"apply_many lost a fence it should have won: {outcomes}")


# --------------------------------------------------------------------------- scenarios


def bench_enqueue(report: Report, sizes: Sizes) -> None:
    storage, clock = new_storage(), SystemClock()
    empty_tables()
    for size in (1, sizes.batch):
        records = jobs(clock, size)
        probe, _ = profile(f"enqueue({size:,} jobs)", partial(storage.enqueue, records))
        report.profiles.append(probe)

    # Single: one enqueue call (one transaction) per job. Records are built outside the clock.
    empty_tables()
    batch = jobs(clock, sizes.single)
    done, deadline = 0, time.monotonic() + sizes.cap
    with counting() as tally:
        start = time.perf_counter()
        for job in batch:
            storage.enqueue([job])
            done += 1
            if time.monotonic() > deadline:
                break
        elapsed = time.perf_counter() - start
    report.rates.append(
        Rate(
            "enqueue, 1 job per call",
            done,
            elapsed,
            done,
            tally.statements,
            tally.seconds,
            done < len(batch),
        )
    )

    # Batched, in batches of ``sizes.batch``, then all at once.
    for size in (sizes.batch, sizes.one_batch):
        empty_tables()
        batches = [
            jobs(clock, min(size, sizes.batched_total - first))
            for first in range(0, sizes.batched_total, size)
        ]
        done, calls, deadline = 0, 0, time.monotonic() + sizes.cap
        with counting() as tally:
            start = time.perf_counter()
            for chunk in batches:
                storage.enqueue(chunk)
                done, calls = done + len(chunk), calls + 1
                if time.monotonic() > deadline:
                    break
            elapsed = time.perf_counter() - start
        name = f"enqueue, batches of {size:,}"
        report.rates.append(
            Rate(
                name,
                done,
                elapsed,
                calls,
                tally.statements,
                tally.seconds,
                done < sizes.batched_total,
            )
        )


def bench_drain(report: Report, sizes: Sizes) -> None:
    storage, clock = new_storage(), SystemClock()
    for size in (1, 16, 64):
        empty_tables()
        enqueue_backlog(storage, clock, sizes.drain + size)
        vacuum_analyze()
        claim_profile, claimed = profile(
            f"claim(max_count={size})", partial(storage.claim, request(size))
        )
        if len(claimed) != size:
            raise BenchError(f"claim of {size} returned {len(claimed)} jobs from a full queue")
        transitions = [succeed(job, clock) for job in claimed]
        apply_profile, outcomes = profile(
            f"apply_many({size} succeeded)", partial(storage.apply_many, transitions)
        )
        if not all(outcome is True for outcome in outcomes):
            raise BenchError(f"apply_many lost a fence it should have won: {outcomes}")
        report.profiles += [claim_profile, apply_profile]

        done, calls, deadline = 0, 0, time.monotonic() + sizes.cap
        claiming = 0.0
        with counting() as tally:
            start = time.perf_counter()
            while done < sizes.drain and time.monotonic() < deadline:
                claim_start = time.perf_counter()
                claimed = storage.claim(request(size))
                claiming += time.perf_counter() - claim_start
                if not claimed:
                    break
                ack(storage, clock, claimed)
                done, calls = done + len(claimed), calls + 1
            elapsed = time.perf_counter() - start
        per_call = 1000 / max(calls, 1)
        report.rates.append(
            Rate(
                f"claim + apply_many, batch {size}",
                done,
                elapsed,
                calls,
                tally.statements,
                tally.seconds,
                done < sizes.drain,
                f"claim {claiming * per_call:.2f} ms + ack {(elapsed - claiming) * per_call:.2f}"
                " ms per batch",
            )
        )


def fence_check(report: Report) -> None:
    """One apply_many of 16 where one transition is stale (an attempt the job is not on):
    still one statement, and only the stale one loses its fence."""
    storage, clock = new_storage(), SystemClock()
    empty_tables()
    enqueue_backlog(storage, clock, 16)
    claimed = storage.claim(request(16))
    transitions = [succeed(job, clock) for job in claimed]
    stale = claimed[5]
    transitions[5] = replace(transitions[5], expected_attempt=stale.attempt + 1)
    checked, outcomes = profile(
        "apply_many(16, one stale)", partial(storage.apply_many, transitions)
    )
    report.fence_check = {
        "outcomes": [o if isinstance(o, bool) else repr(o) for o in outcomes],
        "expected": [position != 5 for position in range(16)],
        "statements": len(checked.statements),
        "round_trips": checked.round_trips,
        "stale_job_state_after": storage.get_job(stale.id).state.value,
    }


def seed_rows(storage: Any, clock: SystemClock, first: int, count: int, *, ready: bool) -> None:
    """Insert ``count`` rows, succeeded or (``ready``) enqueued, in one server-side
    ``INSERT ... SELECT generate_series``. Every column but the id, state and times is
    copied from a template job stored through the provider (then deleted), so the rows
    match the schema as migrated; ids ``00000000-0000-7000-8000-<first..>`` never collide
    with minted ones."""
    from millrace_django.models import Job

    table = Job._meta.db_table
    generated = {"seq", "uuid", "state", "created_at", "finished_at", "worker_id", "lease_until"}
    copied = [f.column for f in Job._meta.concrete_fields if f.column not in generated]
    columns = ", ".join(f'"{c}"' for c in ["uuid", "state", "created_at", "finished_at", *copied])
    values = ", ".join(f't."{c}"' for c in copied)
    template = make_job(clock, queue=QUEUE)
    storage.enqueue([template])
    cursor_execute(
        f"""
        INSERT INTO {table} ({columns})
        SELECT ('00000000-0000-7000-8000-' || lpad(to_hex(i), 12, '0'))::uuid,
               %(state)s,
               %(origin)s + i * interval '1 millisecond',
               CASE WHEN %(ready)s THEN NULL
                    ELSE %(origin)s + i * interval '1 millisecond' + interval '1 second' END,
               {values}
        FROM generate_series(%(first)s::bigint, %(last)s::bigint) AS i,
             (SELECT * FROM {table} WHERE uuid = %(template)s) AS t
        """,
        {
            "state": ENQUEUED_CODE if ready else SUCCEEDED_CODE,
            "ready": ready,
            "origin": template.created_at - timedelta(days=1 if ready else 30),
            "first": first,
            "last": first + count - 1,
            "template": template.id,
        },
    )
    cursor_execute(f"DELETE FROM {table} WHERE uuid = %s", [template.id])


def bench_latency(report: Report, sizes: Sizes) -> None:
    """Claim latency as finished rows pile up (the issue's figure), then once more with a
    large ready backlog on top (what the claim's plan scales with)."""
    from millrace_django.models import Job

    storage, clock = new_storage(), SystemClock()
    table = Job._meta.db_table
    empty_tables()
    finished_seeded = next_id = 0
    stages = [(finished, sizes.backlog) for finished in sizes.finished_steps]
    stages.append((sizes.finished_steps[-1], sizes.big_backlog))
    for position, (target, backlog) in enumerate(stages):
        # Only the finished rows carry over from one stage to the next.
        cursor_execute(f"DELETE FROM {table} WHERE state <> ALL(%s)", [list(TERMINAL_CODES)])
        deadline = time.monotonic() + sizes.seed_cap
        while finished_seeded < target and time.monotonic() < deadline:
            count = min(sizes.seed_chunk, target - finished_seeded)
            seed_rows(storage, clock, next_id + 1, count, ready=False)
            finished_seeded, next_id = finished_seeded + count, next_id + count
        if backlog > sizes.backlog:
            seed_rows(storage, clock, next_id + 1, backlog, ready=True)
            next_id += backlog
        else:
            enqueue_backlog(storage, clock, backlog)
        vacuum_analyze()
        (finished,) = cursor_execute(
            f"SELECT count(*) FROM {table} WHERE state = ANY(%s)", [list(TERMINAL_CODES)]
        )[0]
        for _ in range(sizes.latency_warmup):
            ack(storage, clock, storage.claim(request(1)))

        samples: list[float] = []
        deadline = time.monotonic() + sizes.cap
        while len(samples) < sizes.latency_claims and time.monotonic() < deadline:
            start = time.perf_counter()
            claimed = storage.claim(request(1))
            samples.append(time.perf_counter() - start)
            if len(claimed) != 1:
                raise BenchError(f"claim returned {len(claimed)} jobs from a ready backlog")
            ack(storage, clock, claimed)
        samples.sort()
        report.latencies.append(
            Latency(
                finished_rows=finished,
                ready_backlog=backlog,
                claims=len(samples),
                p50_ms=statistics.median(samples) * 1000,
                p99_ms=samples[round(0.99 * (len(samples) - 1))] * 1000,
                mean_ms=statistics.fmean(samples) * 1000,
                capped=len(samples) < sizes.latency_claims,
            )
        )
        if position >= len(sizes.finished_steps) - 1:
            explain_hot_path(
                report,
                storage,
                clock,
                finished,
                backlog,
                with_apply=backlog == sizes.backlog,
            )


def explain_hot_path(
    report: Report,
    storage: Any,
    clock: SystemClock,
    finished: int,
    backlog: int,
    *,
    with_apply: bool,
) -> None:
    """EXPLAIN (ANALYZE, BUFFERS) exactly what the provider sent for a claim (and for an
    apply_many of 64), with its parameters, rolled back."""
    from django.db import connections, transaction

    from millrace_django.models import Job

    table = Job._meta.db_table
    captured, claimed = profile("claim(1)", partial(storage.claim, request(1)))
    ack(storage, clock, claimed)
    probes: list[tuple[str, Profile, list[Any] | None]] = [("claim(max_count=1)", captured, None)]
    if with_apply:
        more = storage.claim(request(64))
        transitions = [succeed(job, clock) for job in more]
        acked, _ = profile("apply_many(64)", partial(storage.apply_many, transitions))
        # The acknowledged jobs are succeeded now: put them back (inside the rolled-back
        # transaction) so the captured UPDATE finds its rows fenced as they were.
        probes.append(("apply_many(64 succeeded)", acked, [job.id for job in more]))
    where = f"{finished:,} finished rows, {backlog:,} ready"
    for name, probe, restore in probes:
        for sent, params in zip(probe.statements, probe.params, strict=True):
            sql = explainable(sent)
            if sql is None:
                continue
            with transaction.atomic(using=ALIAS):
                if restore:
                    cursor_execute(
                        f"UPDATE {table} SET state = 2, worker_id = %s, finished_at = NULL "
                        "WHERE uuid = ANY(%s)",
                        [WORKER, restore],
                    )
                with connections[ALIAS].cursor() as cursor:
                    cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + sql, params)
                    plan = "\n".join(row[0] for row in cursor.fetchall())
                transaction.set_rollback(True, using=ALIAS)
            report.explains[f"{name}, {where}: {statement_label(sql)}"] = plan


def explainable(sql: str) -> str | None:
    """The statement of ``sql`` to EXPLAIN: a hot statement's ``EXECUTE`` (its first call
    on a session also sends the ``PREPARE``), or a plain statement; ``None`` for the
    statement timeout, notifications and parent locks."""
    if "EXECUTE millrace_" in sql:
        return sql[sql.index("EXECUTE millrace_") :]
    text = " ".join(sql.split()).upper()
    if text.startswith("SELECT SET_CONFIG") or "PG_NOTIFY" in text or ";" in text:
        return None
    return sql if text.startswith(("WITH", "UPDATE", "SELECT", "DELETE", "INSERT")) else None


def claim_plan_shape(plan: str) -> str:
    """How the claim found its rows, in words."""
    if "Index Scan using millrace_job_ready" in plan:
        access = "Index Scan on millrace_job_ready"
    elif "Bitmap Index Scan on millrace_job_ready" in plan:
        access = "Bitmap scan of millrace_job_ready"
    elif "Seq Scan on millrace_job " in plan:
        access = "Seq Scan of millrace_job"
    else:
        access = "millrace_job_ready not used"
    rows = re.search(
        r"Sort Key: millrace_job\.priority DESC.*?actual time=\S+ rows=(\d+)", plan, re.S
    )
    if rows:
        return (
            f"{access}, then a Sort of all {int(rows.group(1)):,} claimable rows of the queue "
            "before LIMIT (cost grows with the ready backlog)"
        )
    return f"{access}, in index order, stopping after LIMIT rows (flat in the backlog)"


# --------------------------------------------------------------------------- report


def describe_machine(report: Report) -> None:
    model = "unknown"
    memory = "unknown"
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            model = next(
                (line.split(":", 1)[1].strip() for line in info if line.startswith("model name")),
                model,
            )
        with open("/proc/meminfo", encoding="utf-8") as info:
            kib = next(int(line.split()[1]) for line in info if line.startswith("MemTotal"))
            memory = f"{kib / 1024 / 1024:.1f} GiB"
    except (OSError, StopIteration, ValueError):
        pass
    report.machine = {
        "cores": os.cpu_count(),
        "cpu": model,
        "memory": memory,
        "os": platform.platform(),
    }
    import django

    settings = {
        name: cursor_execute(f"SHOW {name}")[0][0]
        for name in ("server_version", "shared_buffers", *DURABILITY)
    }
    report.versions = {
        "python": platform.python_version(),
        "django": django.get_version(),
        "psycopg": f"{psycopg.__version__} ({psycopg.pq.__impl__}, libpq {psycopg.pq.version()})",
        "postgresql": settings.pop("server_version"),
        "server settings": ", ".join(f"{k}={v}" for k, v in settings.items()),
    }
    report.machine["load average at start"] = load_average()
    report.machine["round trip us (SELECT 1, p50 of 500)"] = round(round_trip_us(), 1)


def load_average() -> str:
    try:
        return " ".join(f"{value:.2f}" for value in os.getloadavg())
    except OSError:
        return "unknown"


def round_trip_us() -> float:
    """The floor every round trip pays here: a bare ``SELECT 1`` through Django."""
    from django.db import connections

    samples = []
    with connections[ALIAS].cursor() as cursor:
        for _ in range(500):
            start = time.perf_counter()
            cursor.execute("SELECT 1")
            cursor.fetchall()
            samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1e6


def judge(report: Report) -> None:
    rates = {rate.scenario: rate for rate in report.rates}

    def target(name: str, measured: str, met: bool | None) -> None:
        verdict = "n/a" if met is None else ("met" if met else "NOT met")
        report.targets.append({"target": name, "measured": measured, "verdict": verdict})

    single = rates.get("enqueue, 1 job per call")
    if single:
        target(
            "single enqueue >= 2,100 jobs/s",
            f"{single.per_second:,.0f} jobs/s",
            single.per_second >= 2_100,
        )
    batched = [r for r in report.rates if r.scenario.startswith("enqueue, batches")]
    if batched:
        best = max(batched, key=lambda r: r.per_second)
        full = best.jobs >= 10_000
        target(
            "batched enqueue of 10,000 jobs >= 50,000 jobs/s",
            f"{best.per_second:,.0f} jobs/s ({best.scenario})",
            best.per_second >= 50_000 if full else None,
        )
    claims = [p for p in report.profiles if p.call.startswith("claim(max_count")]
    if claims:
        worst = max(len(hot(p)) for p in claims)
        target(
            "a batch claim in one statement (PostgreSQL)",
            ", ".join(f"{p.call}: {cost(p)}" for p in claims),
            worst == 1,
        )
    applies = [
        p for p in report.profiles if p.call.startswith("apply_many(") and "stale" not in p.call
    ]
    if applies and report.fence_check:
        fenced = report.fence_check["outcomes"] == report.fence_check["expected"]
        target(
            "apply_many of plain successes in one set-based statement, each fenced",
            ", ".join(f"{p.call}: {cost(p)}" for p in applies)
            + "; one stale of 16: "
            + ("only it lost" if fenced else str(report.fence_check["outcomes"])),
            max(len(hot(p)) for p in applies) == 1 and fenced,
        )
    small = [
        lat for lat in report.latencies if lat.ready_backlog == report.latencies[0].ready_backlog
    ]
    if len(small) >= 2:
        empty, full_table = small[0], small[-1]
        ratio = full_table.p50_ms / empty.p50_ms
        target(
            f"claim latency with {full_table.finished_rows:,} finished rows <= 1.2x empty",
            f"p50 {ratio:.2f}x, mean {full_table.mean_ms / empty.mean_ms:.2f}x",
            ratio <= 1.2 if full_table.finished_rows >= 1_000_000 else None,
        )
    claim_plans = [(k, plan) for k, plan in report.explains.items() if k.startswith("claim")]
    if claim_plans:
        key, plan = claim_plans[0]
        uses_index = "millrace_job_ready" in plan
        target(
            "the claim uses the partial index (EXPLAIN)",
            f"{claim_plan_shape(plan)} [{key.split(':')[0]}]",
            uses_index,
        )


def hot(p: Profile) -> list[str]:
    """The statements of a call but the ``set_config(statement_timeout)`` a transaction
    starts with where the statement timeout cannot travel with the statement."""
    return [s for s in p.statements if not s.lstrip().startswith("SELECT set_config")]


def cost(p: Profile) -> str:
    extra = len(p.statements) - len(hot(p))
    return f"{len(hot(p))} stmt" + (" + set_config" if extra else "") + f", {p.round_trips} rt"


def print_report(report: Report, out: Any) -> None:
    def say(text: str = "") -> None:
        print(text.rstrip(), file=out)

    m, v = report.machine, report.versions
    say("millrace_django storage benchmark (DjangoStorage on PostgreSQL)")
    say(f"machine:  {m['cores']} cores, {m['cpu']}, {m['memory']} RAM, {m['os']}")
    say(
        f"versions: Python {v['python']}, Django {v['django']}, psycopg {v['psycopg']}, "
        f"PostgreSQL {v['postgresql']}"
    )
    say(f"server:   {v['server settings']} (loopback TCP)")
    say(
        f"floor:    one round trip (SELECT 1) {m['round trip us (SELECT 1, p50 of 500)']} us; "
        f"load average {m['load average at start']} at start, {m.get('load average at end')} "
        "at end"
    )
    say()
    say(
        f"{'scenario':<34} {'jobs':>7} {'calls':>6} {'seconds':>8} {'jobs/s':>9} "
        f"{'stmts/call':>10} {'in SQL':>7}  split"
    )
    for r in report.rates:
        note = "  (capped)" if r.capped else ""
        share = r.execute_seconds / r.seconds if r.seconds else 0.0
        say(
            f"{r.scenario:<34} {r.jobs:>7,} {r.calls:>6,} {r.seconds:>8.3f} "
            f"{r.per_second:>9,.0f} {r.statements / max(r.calls, 1):>10.1f} {share:>7.0%}"
            f"  {r.detail}{note}"
        )
    say(
        "  (in SQL: share of the wall time spent inside cursor.execute -- driver, wire and "
        "server; BEGIN/COMMIT and Python/ORM work are the rest)"
    )
    say()
    say(
        f"{'claim latency (max_count=1)':<34} {'claims':>7} {'p50 ms':>8} {'p99 ms':>8} "
        f"{'mean ms':>8} {'p50 ratio':>9}"
    )
    base = report.latencies[0].p50_ms if report.latencies else 1.0
    for lat in report.latencies:
        label = f"{lat.finished_rows:,} finished, {lat.ready_backlog:,} ready"
        note = "  (capped)" if lat.capped else ""
        say(
            f"{label:<34} {lat.claims:>7} {lat.p50_ms:>8.3f} {lat.p99_ms:>8.3f} "
            f"{lat.mean_ms:>8.3f} {lat.p50_ms / base:>8.2f}x{note}"
        )
    say()
    say(
        "SQL per call (statements: Django execute_wrapper; "
        "round trips: libpq trace, BEGIN/COMMIT included)"
    )
    for p in report.profiles:
        say(f"  {p.call:<28} {len(p.statements)} statements, {p.round_trips} round trips")
        say(f"      wire: {' | '.join(p.wire)}")
        for statement in p.statements:
            say(f"      - {statement_label(statement)}")
    if report.fence_check:
        f = report.fence_check
        verdict = "as expected" if f["outcomes"] == f["expected"] else str(f["outcomes"])
        say(
            f"  fence check: apply_many(16) with position 5 stale -> {f['statements']} "
            f"statements, {f['round_trips']} round trips; outcomes {verdict}; "
            f"stale job left {f['stale_job_state_after']}"
        )
    for key, plan in report.explains.items():
        say()
        say(f"EXPLAIN (ANALYZE, BUFFERS) {key}")
        if key.startswith("claim"):
            say(f"  -> {claim_plan_shape(plan)}")
        for line in plan.splitlines():
            say(f"    {line}")
    say()
    say("targets (measured, not asserted)")
    for t in report.targets:
        say(f"  [{t['verdict']:^7}] {t['target']}: {t['measured']}")


# --------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--quick", action="store_true", help="small smoke run (< 60 s)")
    parser.add_argument(
        "--json", metavar="PATH", help="also write the results as JSON to PATH ('-': stdout)"
    )
    args = parser.parse_args(argv)
    sizes = QUICK if args.quick else FULL
    url = server_url()
    name = f"millrace_bench_{os.getpid()}"
    report = Report()
    out = sys.stderr if args.json == "-" else sys.stdout
    began = time.monotonic()
    create_database(url, name)
    try:
        setup_django(url, name)
        describe_machine(report)
        steps: list[tuple[str, Callable[[Report, Sizes], None]]] = [
            ("enqueue", bench_enqueue),
            ("claim + apply_many", bench_drain),
            ("fence check", lambda r, _s: fence_check(r)),
            ("claim latency", bench_latency),
        ]
        for label, step in steps:
            print(f"... {label} ({time.monotonic() - began:.0f} s)", file=sys.stderr, flush=True)
            step(report, sizes)
        report.machine["load average at end"] = load_average()
        judge(report)
    finally:
        from django.db import connections

        connections.close_all()
        drop_database(url, name)
    print_report(report, out)
    print(f"\n(total {time.monotonic() - began:.0f} s)", file=out)
    if args.json:
        text = json.dumps(report.as_json(), indent=2, default=str)
        if args.json == "-":
            print(text)
        else:
            Path(args.json).write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
