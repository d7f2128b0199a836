"""Soak benchmark: an hour of steady load on PostgreSQL, purging all along (see
bench/README.md and docs/benchmarks.md).

Creates its own database on the server named by ``MILLRACE_TEST_POSTGRES_URL`` (``make
bench-soak`` starts one with PostgreSQL's durable defaults), migrates it, optionally sets
storage parameters on the job tables, and starts ``manage.py millrace_worker
--processes N`` (with its scheduler, so finished jobs older than ``--retention`` are
purged). It measures the workers' drain rate on a backlog (unless given ``--rate``), then
a producer process enqueues at half that rate, in small transactions, for ``--minutes``.
Per ``--window`` it prints jobs/s, pickup p50/p99 (each job's start minus its
transaction's commit, both reported over loopback UDP), the job tables' sizes, dead rows
and autovacuum runs, then a verdict. Every loop is bounded in count and in time; the
database is dropped at the end.

    make bench-soak SOAK_ARGS="--minutes 15 --storage-params tuned"
    eval "$(scripts/testdb.sh start)"; .venv/bin/python bench/soak.py --minutes 1 --window 0.25
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from millrace_processes import REPO, environment, worker_command
from peers import harness
from pgserver import DURABILITY, admin_connection, database_url, recreate_database, server_url

LOG_DIR = REPO / ".tmp" / "soak"
PRODUCER = str(REPO / "bench" / "soak_producer.py")
AUTOVACUUM = (
    "autovacuum_vacuum_scale_factor = 0.01, autovacuum_vacuum_threshold = 1000, "
    "autovacuum_vacuum_insert_scale_factor = 0.01, autovacuum_analyze_scale_factor = 0.02, "
    "autovacuum_vacuum_cost_delay = 0"
)
STORAGE_PARAMETERS: dict[str, dict[str, str]] = {
    "default": {},
    "tuned": {"millrace_job": AUTOVACUUM},
    "fillfactor-50": {"millrace_job": f"fillfactor = 50, {AUTOVACUUM}"},
}
"""Per ``--storage-params`` choice, the storage parameters set on each table (``ALTER
TABLE ... SET (...)``, right after migrating; a table the schema lacks is skipped).
docs/benchmarks.md gives what each one measured."""
SERVER_SETTINGS = (
    *DURABILITY,
    "shared_buffers",
    "autovacuum_naptime",
    "autovacuum_vacuum_cost_delay",
    "autovacuum_vacuum_cost_limit",
    "max_wal_size",
)
THROUGHPUT_TOLERANCE = 0.10
"""The last window's jobs/s may be at most this much below the first's..."""
P99_TOLERANCE = 0.10
"""...its pickup p99 at most this much above the first's..."""
SIZE_TOLERANCE = 0.05
"""...and no size (millrace_job's heap, its indexes, every millrace table together) may
grow by more than this from the window before the last to the last."""
START_CAP = 60.0
"""Seconds the workers (or the producer's first commit) may take to appear."""
MEASURE_CAP = 120.0
"""Seconds the drain-rate measurement may take."""
DRAIN_POLL = 0.02
"""Seconds between counts of the unfinished jobs while the drain rate is measured."""
RECEIVE_BUFFER = 64 * 1024 * 1024
"""Bytes of the stamp socket's receive buffer, where the system allows it: the workers
take the CPU in bursts, and the stamps of a burst wait there for the collector."""
WINDOW_GRACE = 0.5
"""Seconds after a window's end before its stamps are counted (late datagrams)."""
MB = 1024 * 1024


# --------------------------------------------------------------------------- stamps


class Stamps:
    """Collects the stamps of the producer's commits and of the jobs' starts, on a
    thread, until stopped (or ``deadline``)."""

    def __init__(self, listener: harness.StampListener, deadline: float) -> None:
        self._listener = listener
        self._deadline = deadline
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.commit_times: dict[str, float] = {}
        self._commits: list[tuple[float, int]] = []
        self._starts: list[tuple[str, float]] = []
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set() and time.monotonic() < self._deadline:
            stamp = self._listener.receive(0.2)
            if stamp is None:
                continue
            token, at = stamp
            with self._lock:
                if token.startswith("c"):
                    name, count = token[1:].rsplit(":", 1)
                    self.commit_times[name] = at
                    self._commits.append((at, int(count)))
                else:
                    self._starts.append((token, at))

    def take(self) -> tuple[list[tuple[float, int]], list[tuple[str, float]]]:
        """The commits (time, jobs) and starts (token, time) received since the last
        call."""
        with self._lock:
            commits, self._commits = self._commits, []
            starts, self._starts = self._starts, []
        return commits, starts

    def forget_before(self, moment: float) -> None:
        """Drop commit times before ``moment`` (their jobs have all been counted)."""
        with self._lock:
            self.commit_times = {k: v for k, v in self.commit_times.items() if v >= moment}

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


# --------------------------------------------------------------------------- figures


@dataclass(frozen=True)
class TableStats:
    name: str
    heap: int
    indexes: int
    total: int
    live: int
    dead: int
    autovacuums: int
    autoanalyzes: int
    seq_scans: int


@dataclass(frozen=True)
class Window:
    number: int
    minutes: float
    """Minutes since the load started, at the window's end."""
    load: tuple[float, float]
    """The machine's 1- and 5-minute load averages at the window's end."""
    enqueued_per_second: float
    jobs_per_second: float
    """Jobs finished per second: enqueued, less the growth of the unfinished."""
    pickup_p50_ms: float
    pickup_p99_ms: float
    samples: int
    """Jobs timed (stamps of their start received, with their commit's)."""
    unmatched: int
    """Starts whose commit stamp never came (a lost datagram)."""
    backlog: int
    """Jobs not finished at the window's end."""
    wal_mb: float
    tables: tuple[TableStats, ...]
    job_indexes: tuple[tuple[str, int], ...]

    def table(self, name: str) -> TableStats:
        return next(t for t in self.tables if t.name == name)

    @property
    def all_tables(self) -> int:
        return sum(t.total for t in self.tables)


@dataclass
class Report:
    header: dict[str, str] = field(default_factory=dict)
    drain_measure: dict[str, Any] = field(default_factory=dict)
    rate: float = 0.0
    windows: list[Window] = field(default_factory=list)
    verdict: list[dict[str, Any]] = field(default_factory=list)


def percentile_ms(values: Sequence[float], fraction: float) -> float:
    return harness.percentile(values, fraction) * 1000 if values else float("nan")


# --------------------------------------------------------------------------- database


class Database:
    """The soak's database, read over one autocommit connection."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.conn = admin_connection(url)

    def rows(self, statement: str, params: Any = None) -> list[tuple[Any, ...]]:
        cursor = self.conn.execute(statement, params)
        return list(cursor.fetchall()) if cursor.description else []

    def value(self, statement: str, params: Any = None) -> Any:
        return self.rows(statement, params)[0][0]

    def tables(self) -> tuple[TableStats, ...]:
        return tuple(
            TableStats(*row)
            for row in self.rows(
                "SELECT relname, pg_relation_size(relid), pg_indexes_size(relid), "
                "pg_total_relation_size(relid), n_live_tup, n_dead_tup, autovacuum_count, "
                "autoanalyze_count, seq_scan FROM pg_stat_user_tables "
                "WHERE relname LIKE 'millrace\\_%' ORDER BY relname"
            )
        )

    def job_indexes(self) -> tuple[tuple[str, int], ...]:
        return tuple(
            (str(name), int(size))
            for name, size in self.rows(
                "SELECT indexrelname, pg_relation_size(indexrelid) FROM pg_stat_user_indexes "
                "WHERE relname = 'millrace_job' ORDER BY indexrelname"
            )
        )

    def wal(self) -> int:
        return int(self.value("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')"))

    def storage_parameters(self) -> str:
        options = self.rows(
            "SELECT relname, reloptions FROM pg_class WHERE relname LIKE 'millrace\\_%' "
            "AND relkind = 'r' AND reloptions IS NOT NULL ORDER BY relname"
        )
        return "; ".join(f"{name}: {', '.join(values)}" for name, values in options) or "none"

    def close(self) -> None:
        self.conn.close()


# --------------------------------------------------------------------------- phases


SO_RCVBUFFORCE = getattr(socket, "SO_RCVBUFFORCE", 33)


def set_storage_parameters(db: Database, parameters: dict[str, str]) -> None:
    for table, options in parameters.items():
        if db.value("SELECT to_regclass(%s) IS NOT NULL", [table]):
            db.rows(f"ALTER TABLE {table} SET ({options})")


def run_producer(variables: dict[str, str], *arguments: str) -> None:
    subprocess.run(
        [sys.executable, PRODUCER, *arguments],
        env={**os.environ, **variables},
        cwd=REPO,
        check=True,
        timeout=START_CAP + MEASURE_CAP,
    )


def wait_workers(db: Database, processes: int, workers: list[Any], log: Path) -> None:
    deadline = time.monotonic() + START_CAP
    while db.value("SELECT count(*) FROM millrace_worker") < processes:
        harness.check_alive(workers, log)
        if time.monotonic() > deadline:
            raise RuntimeError(f"{processes} worker process(es) did not register")
        time.sleep(0.2)


def drain(
    stamps: Stamps, peer: Any, variables: dict[str, str], token: str, count: int
) -> dict[str, Any]:
    """Enqueue ``count`` jobs in one transaction and wait (at most ``MEASURE_CAP``) until
    none is left unfinished; the rate is from the commit to that count of zero."""
    run_producer(variables, "backlog", token, str(count))
    left = peer.remaining()
    deadline = time.monotonic() + MEASURE_CAP
    while left and time.monotonic() < deadline:
        time.sleep(DRAIN_POLL)
        left = peer.remaining()
    done = time.time()
    stamps.take()
    committed = stamps.commit_times.pop(token, None)
    if committed is None:
        raise RuntimeError(f"the producer's commit of {count} jobs was not seen")
    seconds = done - committed
    return {
        "jobs": count,
        "seconds": round(seconds, 3),
        "jobs_per_second": round((count - left) / seconds, 1),
        "capped": left > 0,
    }


def clear_jobs(db: Database) -> None:
    """Delete the measurement's jobs, as a purge would. No ``VACUUM (ANALYZE)`` of the
    emptied table: its statistics would then say "empty", and the workers' prepared
    claims, planned again for an empty table, scanned it sequentially under the load
    until the next autoanalyze (pickups of up to 54 s in the first minute, seen)."""
    db.rows("DELETE FROM millrace_job")


@dataclass
class Progress:
    """What the windows so far leave for the next one."""

    t0: float
    remaining: int
    wal: int
    commits: list[tuple[float, int]] = field(default_factory=list)
    starts: list[tuple[str, float]] = field(default_factory=list)


def close_window(
    number: int,
    begin: float,
    end: float,
    stamps: Stamps,
    db: Database,
    peer: Any,
    progress: Progress,
) -> Window:
    """The window [begin, end): its stamps (later ones are kept for the next window),
    its jobs done (enqueued minus the growth of the unfinished), the tables now."""
    commits, starts = stamps.take()
    commits, starts = progress.commits + commits, progress.starts + starts
    progress.commits = [c for c in commits if c[0] >= end]
    progress.starts = [s for s in starts if s[1] >= end]
    enqueued = sum(count for at, count in commits if at < end)
    pickups: list[float] = []
    unmatched = 0
    for token, at in starts:
        if at >= end:
            continue
        committed = stamps.commit_times.get(token)
        if committed is None:
            unmatched += 1
        else:
            pickups.append(at - committed)
    stamps.forget_before(begin - 60.0)
    remaining, wal = peer.remaining(), db.wal()
    seconds = end - begin
    window = Window(
        number=number,
        minutes=(end - progress.t0) / 60,
        load=(os.getloadavg()[0], os.getloadavg()[1]),
        enqueued_per_second=enqueued / seconds,
        jobs_per_second=(enqueued - (remaining - progress.remaining)) / seconds,
        pickup_p50_ms=percentile_ms(pickups, 0.50),
        pickup_p99_ms=percentile_ms(pickups, 0.99),
        samples=len(pickups),
        unmatched=unmatched,
        backlog=remaining,
        wal_mb=(wal - progress.wal) / MB,
        tables=db.tables(),
        job_indexes=db.job_indexes(),
    )
    progress.remaining, progress.wal = remaining, wal
    return window


# --------------------------------------------------------------------------- report


def header(db: Database, options: argparse.Namespace) -> dict[str, str]:
    import django

    model, memory = "unknown", "unknown"
    try:
        info = Path("/proc/cpuinfo").read_text().splitlines()
        model = next(line.split(":", 1)[1].strip() for line in info if "model name" in line)
        meminfo = Path("/proc/meminfo").read_text().split()
        memory = f"{int(meminfo[meminfo.index('MemTotal:') + 1]) / 1024 / 1024:.1f} GiB"
    except (OSError, StopIteration, ValueError):
        pass
    commit = subprocess.run(
        ["git", "describe", "--always", "--dirty"], cwd=REPO, capture_output=True, text=True
    ).stdout.strip()
    settings = dict(
        db.rows(
            "SELECT name, setting || coalesce(unit, '') FROM pg_settings WHERE name = ANY(%s)",
            [list(SERVER_SETTINGS)],
        )
    )
    return {
        "commit": commit or "unknown",
        "machine": f"{os.cpu_count()} cores, {model}, {memory} RAM, {platform.platform()}",
        "versions": f"Python {platform.python_version()}, Django {django.get_version()}, "
        f"PostgreSQL {db.value('SHOW server_version')}",
        "server": ", ".join(f"{name}={settings.get(name)}" for name in SERVER_SETTINGS),
        "storage parameters": f"{options.storage_params}: {db.storage_parameters()}",
        "workers": f"millrace_worker --processes {options.processes} (scheduler on), "
        f"RETENTION {options.retention:g} s",
        "load average at start": " ".join(f"{v:.2f}" for v in os.getloadavg()),
    }


COLUMNS = (
    "window",
    "min",
    "load 1/5 min",
    "enqueued/s",
    "jobs/s",
    "pickup p50 ms",
    "pickup p99 ms",
    "timed",
    "backlog",
    "job heap MB",
    "job indexes MB",
    "job total MB",
    "other tables MB",
    "job live / dead rows",
    "job autovacuum / autoanalyze",
    "job seq scans",
    "WAL MB",
)


def window_row(w: Window) -> list[str]:
    job = w.table("millrace_job")
    others = w.all_tables - job.total
    return [
        str(w.number),
        f"{w.minutes:.1f}",
        f"{w.load[0]:.2f} / {w.load[1]:.2f}",
        f"{w.enqueued_per_second:,.0f}",
        f"{w.jobs_per_second:,.0f}",
        f"{w.pickup_p50_ms:.2f}",
        f"{w.pickup_p99_ms:.2f}",
        f"{w.samples:,}",
        f"{w.backlog:,}",
        f"{job.heap / MB:.1f}",
        f"{job.indexes / MB:.1f}",
        f"{job.total / MB:.1f}",
        f"{others / MB:.1f}",
        f"{job.live:,} / {job.dead:,}",
        f"{job.autovacuums} / {job.autoanalyzes}",
        f"{job.seq_scans:,}",
        f"{w.wal_mb:,.0f}",
    ]


def print_columns() -> None:
    print("\n| " + " | ".join(COLUMNS) + " |")
    print("|" + "---|" * len(COLUMNS), flush=True)


def print_indexes(report: Report) -> None:
    if not report.windows:
        return
    first, last = report.windows[0], report.windows[-1]
    before = dict(first.job_indexes)
    print("\nmillrace_job indexes, MB at the end of the first and of the last window:")
    for name, size in last.job_indexes:
        print(f"  {name:<36} {before.get(name, 0) / MB:8.1f} {size / MB:8.1f}")


def judge(windows: Sequence[Window]) -> list[dict[str, Any]]:
    """The criteria, each with its figures: last window against the first for
    throughput and p99, against the one before for sizes."""
    if len(windows) < 2:
        return [{"criterion": "at least two windows", "passed": False, "detail": "too few"}]
    first, before, last = windows[0], windows[-2], windows[-1]
    verdict = [
        {
            "criterion": f"throughput within {THROUGHPUT_TOLERANCE:.0%} of the first window",
            "passed": last.jobs_per_second >= (1 - THROUGHPUT_TOLERANCE) * first.jobs_per_second,
            "detail": f"{first.jobs_per_second:,.0f} -> {last.jobs_per_second:,.0f} jobs/s",
        },
        {
            "criterion": f"pickup p99 within {P99_TOLERANCE:.0%} of the first window",
            "passed": last.pickup_p99_ms <= (1 + P99_TOLERANCE) * first.pickup_p99_ms,
            "detail": f"{first.pickup_p99_ms:.2f} -> {last.pickup_p99_ms:.2f} ms",
        },
    ]
    sizes = {
        "millrace_job heap": lambda w: w.table("millrace_job").heap,
        "millrace_job indexes": lambda w: w.table("millrace_job").indexes,
        "every millrace table (heap, indexes, TOAST)": lambda w: w.all_tables,
    }
    for label, size in sizes.items():
        verdict.append(
            {
                "criterion": f"{label} grew at most {SIZE_TOLERANCE:.0%} in the last window",
                "passed": size(last) <= (1 + SIZE_TOLERANCE) * size(before),
                "detail": f"{size(before) / MB:.1f} -> {size(last) / MB:.1f} MB",
            }
        )
    return verdict


def print_verdict(verdict: list[dict[str, Any]]) -> None:
    failed = [v for v in verdict if not v["passed"]]
    print("\nverdict: " + ("PASS" if not failed else "FAIL"))
    for v in verdict:
        print(f"  [{'pass' if v['passed'] else 'FAIL'}] {v['criterion']}: {v['detail']}")


# --------------------------------------------------------------------------- main


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--minutes", type=float, default=60.0, help="load duration (60)")
    parser.add_argument("--window", type=float, default=5.0, help="minutes per window (5)")
    parser.add_argument(
        "--rate", type=float, help="jobs/s to offer (default: half the measured drain rate)"
    )
    parser.add_argument("--processes", type=int, default=2, help="worker processes (2)")
    parser.add_argument(
        "--retention", type=float, default=120.0, help="MILLRACE RETENTION, seconds (120)"
    )
    parser.add_argument(
        "--producers", type=int, default=3, help="producer processes, sharing the rate (3)"
    )
    parser.add_argument(
        "--per-transaction", type=int, default=20, help="jobs per producer transaction (20)"
    )
    parser.add_argument(
        "--measure-jobs", type=int, default=20_000, help="backlog timed for the drain rate"
    )
    parser.add_argument("--storage-params", choices=sorted(STORAGE_PARAMETERS), default="default")
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    options = parser.parse_args(argv)
    if options.minutes <= 0 or options.window <= 0 or options.window > options.minutes:
        parser.error("--minutes and --window must be positive, the window at most the run")
    return options


def soak(url: str, options: argparse.Namespace, report: Report) -> None:
    LOG_DIR.mkdir(parents=True, exist_ok=True)
    log = LOG_DIR / f"workers-{os.getpid()}.log"
    listener = harness.StampListener()
    with contextlib.suppress(OSError):  # only a privileged process may pass rmem_max
        listener.socket.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, RECEIVE_BUFFER)
    windows = int(options.minutes / options.window + 1e-9)
    window_seconds = options.window * 60
    variables = environment(url, {"RETENTION": options.retention})
    variables[harness.STAMP_ADDRESS] = listener.address
    os.environ.update(variables)
    sys.path.insert(1, str(REPO))
    from peers import millrace as driver  # Django on the soak's database, set up

    peer = driver.make_peer()
    peer.prepare()
    db = Database(url)
    stamps = Stamps(listener, time.monotonic() + 600 + options.minutes * 60 * 1.5)
    try:
        set_storage_parameters(db, STORAGE_PARAMETERS[options.storage_params])
        report.header = header(db, options)
        print("millrace soak benchmark")
        for key, value in report.header.items():
            print(f"  {key:<22} {value}")
        with harness.processes([worker_command(options.processes)], variables, log) as workers:
            wait_workers(db, options.processes, workers, log)
            drain(stamps, peer, variables, "w", min(500, options.measure_jobs))
            if options.rate:
                report.rate = options.rate
            else:
                report.drain_measure = drain(stamps, peer, variables, "b", options.measure_jobs)
                report.rate = report.drain_measure["jobs_per_second"] / 2
                print(f"  {'drain rate measured':<22} {report.drain_measure}")
            clear_jobs(db)
            print(
                f"  {'offered load':<22} {report.rate:,.0f} jobs/s, "
                f"{options.producers} producers, {options.per_transaction} per transaction, "
                f"{windows} windows of "
                f"{options.window:g} min",
                flush=True,
            )
            seconds = f"{windows * window_seconds + 10}"
            share, batch = f"{report.rate / options.producers}", str(options.per_transaction)
            commands = [
                [sys.executable, PRODUCER, "steady", f"s{n}", share, seconds, batch]
                for n in range(options.producers)
            ]
            with harness.processes(commands, variables, log) as producer:
                t0 = first_steady_commit(stamps, producer, log)
                progress = Progress(t0=t0, remaining=peer.remaining(), wal=db.wal())
                print_columns()
                for number in range(1, windows + 1):
                    begin, end = t0 + (number - 1) * window_seconds, t0 + number * window_seconds
                    time.sleep(max(0.0, end + WINDOW_GRACE - time.time()))
                    harness.check_alive([*workers, *producer], log)
                    window = close_window(number, begin, end, stamps, db, peer, progress)
                    report.windows.append(window)
                    print("| " + " | ".join(window_row(window)) + " |", flush=True)
    finally:
        stamps.stop()
        listener.close()
        db.close()
        peer.close()


def first_steady_commit(stamps: Stamps, producer: list[Any], log: Path) -> float:
    """When the steady producer's first transaction committed (the load's start)."""
    deadline = time.monotonic() + START_CAP
    while time.monotonic() < deadline:
        harness.check_alive(producer, log)
        if stamps.commit_times:
            return min(stamps.commit_times.values())
        time.sleep(0.05)
    raise RuntimeError("the producer committed nothing")


def main(argv: list[str] | None = None) -> int:
    options = parse(argv)
    url = server_url()
    name = f"millrace_soak_{os.getpid()}"
    report = Report()
    recreate_database(url, name, create=True)
    try:
        soak(database_url(url, name), options, report)
    finally:
        # The figures first: an hour's windows are not lost to a failed drop.
        print_indexes(report)
        report.verdict = judge(report.windows)
        print_verdict(report.verdict)
        print(f"  load average at end: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
        if options.json:
            text = json.dumps(asdict(report), indent=2, default=str) + "\n"
            Path(options.json).write_text(text)
        recreate_database(url, name, create=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
