"""Worker benchmark: one in-process ``Worker`` draining no-op jobs on PostgreSQL, and the
pickup latency of steady arrivals (see bench/README.md).

Creates a dedicated database on the server named by ``MILLRACE_TEST_POSTGRES_URL``,
migrates it, and for each configuration (the defaults, then tuned ones) seeds a backlog
of no-op jobs and times a worker running until idle with the same connection hooks as
``manage.py millrace_worker``. Then the same drain by ``manage.py millrace_worker
--processes N`` (1 and 4 processes, started and settled before the backlog commits).
Then it enqueues jobs one by one at a steady rate while a worker runs, and reports
enqueue-commit to handler-start latency. It prints figures and
asserts nothing; the database is dropped at the end. Every loop is bounded.

    eval "$(scripts/testdb.sh start)"; .venv/bin/python bench/worker_bench.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import signal
import statistics
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import psycopg
from millrace_processes import environment, worker_command
from pgserver import DURABILITY, database_url, recreate_database, server_url

REPO = Path(__file__).resolve().parent.parent
ALIAS = "bench"
SEED_CHUNK = 1_000
PROCESS_START_CAP = 60.0
"""Seconds worker processes may take to start and register before the run gives up."""
PROCESS_POLL = 0.02
"""Seconds between looks at a multi-process drain's progress."""


@dataclass(frozen=True)
class Sizes:
    backlog: int
    tuned: tuple[tuple[int, int], ...]
    """(claim_batch, concurrency) of the tuned configurations tried."""
    processes: tuple[int, ...]
    """Worker process counts of the ``millrace_worker --processes N`` drains."""
    arrivals_per_second: int
    arrival_seconds: float
    drain_cap: float
    """Seconds a drain may take before the worker is stopped (reported as capped)."""


FULL = Sizes(
    backlog=10_000,
    tuned=((64, 64), (128, 128), (200, 200)),
    processes=(1, 4),
    arrivals_per_second=200,
    arrival_seconds=10.0,
    drain_cap=120.0,
)
QUICK = Sizes(
    backlog=3_000,
    tuned=((128, 128),),
    processes=(1, 4),
    arrivals_per_second=100,
    arrival_seconds=3.0,
    drain_cap=30.0,
)


@dataclass
class Drain:
    configuration: str
    claim_batch: int
    concurrency: int
    processes: int
    jobs: int
    seconds: float
    succeeded: int
    capped: bool = False
    cpu_us_per_job: float = 0.0
    """CPU time of this process (every thread) per job succeeded, in microseconds."""
    claims: int = 0
    """``claim`` calls that returned jobs."""
    writes: int = 0
    """``apply_many`` calls."""

    @property
    def per_second(self) -> float:
        return self.succeeded / self.seconds if self.seconds else 0.0


@dataclass
class Pickup:
    configuration: str
    arrivals: int
    picked_up: int
    p50_ms: float
    p99_ms: float
    max_ms: float
    notifications: bool


@dataclass
class Report:
    machine: dict[str, Any] = field(default_factory=dict)
    versions: dict[str, Any] = field(default_factory=dict)
    drains: list[Drain] = field(default_factory=list)
    process_drains: list[Drain] = field(default_factory=list)
    pickups: list[Pickup] = field(default_factory=list)
    targets: list[dict[str, Any]] = field(default_factory=list)


# --------------------------------------------------------------------------- set-up


def setup_django(url: str, name: str) -> None:
    sys.path.insert(0, str(REPO))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
    from django.conf import settings

    # Only ``default`` and the bench's alias, as in a project: the worker checks each
    # alias's connection around every job (Django's close_old_connections), so the test
    # suite's extra aliases would cost every job a few microseconds.
    for alias in [alias for alias in settings.DATABASES if alias != "default"]:
        del settings.DATABASES[alias]
    parts = urlsplit(url)
    settings.DATABASES[ALIAS] = {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": name,
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": parts.hostname or "127.0.0.1",
        "PORT": str(parts.port or ""),
    }
    settings.DEBUG = False

    import django

    django.setup()
    from django.core.management import call_command

    call_command("migrate", "millrace_django", database=ALIAS, verbosity=0)


def describe_machine(report: Report) -> None:
    import django

    from millrace_django import __version__

    model = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    report.machine = {
        "platform": platform.platform(),
        "cpu": model,
        "cpus": os.cpu_count(),
        "load average": " ".join(f"{value:.2f}" for value in os.getloadavg()),
    }
    server = sql("SHOW server_version")[0][0]
    settings = dict(
        sql(
            "SELECT name, setting FROM pg_settings WHERE name = ANY(%s)",
            [[*DURABILITY, "max_connections"]],
        )
    )
    report.versions = {
        "python": platform.python_version(),
        "django": django.get_version(),
        "psycopg": psycopg.__version__,
        "libpq": psycopg.pq.version(),
        "postgresql": f"{server} ({', '.join(f'{k}={v}' for k, v in sorted(settings.items()))})",
        "millrace_django": __version__,
    }


def sql(statement: str, params: Any = None) -> list[tuple[Any, ...]]:
    from django.db import connections

    with connections[ALIAS].cursor() as cursor:
        cursor.execute(statement, params)
        return list(cursor.fetchall()) if cursor.description else []


# --------------------------------------------------------------------------- pieces


def storage() -> Any:
    from millrace_django.clock import SystemClock
    from millrace_django.storage.orm import DjangoStorage

    return DjangoStorage(ALIAS, SystemClock())


def settings_with(claim_batch: int | None = None, concurrency: int | None = None) -> Any:
    from millrace_django.conf import MillraceSettings

    defaults = MillraceSettings(database=ALIAS)
    return replace(
        defaults,
        claim_batch=claim_batch or defaults.claim_batch,
        concurrency=concurrency or defaults.concurrency,
    )


def empty_tables() -> None:
    sql("TRUNCATE millrace_job, millrace_job_attempt, millrace_job_log, millrace_job_tag")


def seed(store: Any, count: int, *, analyze: bool = True) -> None:
    """``count`` enqueued no-op jobs, stored through the provider in chunks (then the
    table analyzed, unless inside a transaction that workers are waiting on)."""
    import worker_bench_jobs

    from millrace_django.contract import JobState
    from millrace_django.engine import JobClient

    client = JobClient(store, store.clock, settings_with())
    left = count
    while left:
        chunk = min(left, SEED_CHUNK)
        store.enqueue(
            [
                client.build(worker_bench_jobs.noop, (), {}, state=JobState.ENQUEUED, key=None)
                for _ in range(chunk)
            ]
        )
        left -= chunk
    if analyze:
        sql("VACUUM (ANALYZE) millrace_job")


def new_worker(store: Any, config: Any) -> Any:
    from millrace_django.management.support import connection_hooks
    from millrace_django.runtime import Worker

    return Worker(store, store.clock, config, hooks=connection_hooks())


def succeeded_count() -> int:
    from millrace_django.contract import JobState
    from millrace_django.models import JOB_STATE_CODES

    return int(
        sql(
            "SELECT count(*) FROM millrace_job WHERE state = %s",
            [JOB_STATE_CODES[JobState.SUCCEEDED]],
        )[0][0]
    )


def run_bounded(worker: Any, cap: float, *, until_idle: bool) -> tuple[float, bool]:
    """Run ``worker`` on a thread; stop it after ``cap`` seconds. (elapsed, capped)"""
    thread = threading.Thread(target=worker.run, kwargs={"until_idle": until_idle}, daemon=True)
    start = time.perf_counter()
    thread.start()
    thread.join(cap)
    capped = thread.is_alive()
    if capped:
        worker.request_stop()
        worker.request_stop()
        thread.join(30)
    return time.perf_counter() - start, capped


# --------------------------------------------------------------------------- scenarios


class CallCounts:
    """Counts a storage's non-empty claims and its ``apply_many`` calls (wrapped on the
    instance; a counter increment per call)."""

    def __init__(self, store: Any) -> None:
        self.claims = 0
        self.writes = 0
        claim, apply_many = store.claim, store.apply_many

        def counted_claim(request: Any) -> Any:
            claimed = claim(request)
            if claimed:
                self.claims += 1
            return claimed

        def counted_apply_many(transitions: Any) -> Any:
            self.writes += 1
            return apply_many(transitions)

        store.claim, store.apply_many = counted_claim, counted_apply_many


def drain(name: str, config: Any, sizes: Sizes) -> Drain:
    store = storage()
    empty_tables()
    seed(store, sizes.backlog)
    calls = CallCounts(store)
    worker = new_worker(store, config)
    cpu = time.process_time()
    elapsed, capped = run_bounded(worker, sizes.drain_cap, until_idle=True)
    cpu = time.process_time() - cpu
    result = Drain(
        configuration=name,
        claim_batch=config.claim_batch,
        concurrency=config.concurrency,
        processes=1,
        jobs=sizes.backlog,
        seconds=elapsed,
        succeeded=succeeded_count(),
        capped=capped,
        claims=calls.claims,
        writes=calls.writes,
    )
    result.cpu_us_per_job = cpu / max(result.succeeded, 1) * 1e6
    print(
        f"  {name:<15} batch {config.claim_batch:>3}  concurrency {config.concurrency:>3}  "
        f"{result.succeeded:>6} jobs in {elapsed:5.2f} s  {result.per_second:7,.0f} jobs/s  "
        f"{result.claims:>4} claims {result.writes:>4} writes  "
        f"{result.cpu_us_per_job:4.0f} µs CPU/job" + ("  (capped)" if capped else ""),
        flush=True,
    )
    return result


def drain_processes(name: str, processes: int, config: Any, sizes: Sizes, bench_url: str) -> Drain:
    """``manage.py millrace_worker --processes N --no-scheduler`` on the bench database
    (Django settings ``peers.django_settings``, ``MILLRACE`` set to this configuration).
    Timed from the commit of the whole backlog (one transaction, once every process has
    registered) until every job is ``succeeded``; then the workers are stopped."""
    store = storage()
    empty_tables()
    sql("DELETE FROM millrace_worker")
    overrides = {"CLAIM_BATCH": config.claim_batch, "CONCURRENCY": config.concurrency}
    variables = {
        key: value for key, value in os.environ.items() if not key.startswith("MILLRACE_TEST_")
    }
    variables |= environment(bench_url, overrides)
    command = worker_command(processes, scheduler=False)
    supervisor = subprocess.Popen(command, env=variables, cwd=REPO, start_new_session=True)
    try:
        deadline = time.monotonic() + PROCESS_START_CAP
        while sql("SELECT count(*) FROM millrace_worker")[0][0] < processes:
            if supervisor.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{processes} worker process(es) did not start")
            time.sleep(0.1)
        time.sleep(0.5)  # let each settle into its idle wait
        from django.db import transaction

        with transaction.atomic(using=ALIAS):
            seed(store, sizes.backlog, analyze=False)
        start = time.perf_counter()
        done = 0
        while time.perf_counter() - start < sizes.drain_cap:
            done = succeeded_count()
            if done >= sizes.backlog:
                break
            time.sleep(PROCESS_POLL)
        elapsed = time.perf_counter() - start
    finally:
        supervisor.send_signal(signal.SIGTERM)
        try:
            supervisor.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(supervisor.pid, signal.SIGKILL)
            supervisor.wait(10)
    result = Drain(
        configuration=name,
        claim_batch=config.claim_batch,
        concurrency=config.concurrency,
        processes=processes,
        jobs=sizes.backlog,
        seconds=elapsed,
        succeeded=done,
        capped=done < sizes.backlog,
    )
    print(
        f"  {name:<15} batch {config.claim_batch:>3}  concurrency {config.concurrency:>3}  "
        f"{processes} process{'es' if processes > 1 else '  '}  {result.succeeded:>6} jobs in "
        f"{elapsed:5.2f} s  {result.per_second:7,.0f} jobs/s"
        + ("  (capped)" if result.capped else ""),
        flush=True,
    )
    return result


def pickup(name: str, config: Any, sizes: Sizes) -> Pickup:
    """Enqueue one job at a time at a steady rate while a worker runs; time each job from
    its enqueue call returning (committed) to its handler starting."""
    import worker_bench_jobs

    from millrace_django.contract import Capabilities
    from millrace_django.engine import JobClient

    store = storage()
    empty_tables()
    worker_bench_jobs.started.clear()
    worker = new_worker(store, config)
    running = threading.Thread(target=worker.run, daemon=True)
    running.start()
    time.sleep(0.5)  # let the worker settle into its idle wait (and start listening)

    client = JobClient(store, store.clock, config)
    committed: dict[Any, float] = {}
    total = int(sizes.arrivals_per_second * sizes.arrival_seconds)
    interval = 1.0 / sizes.arrivals_per_second
    begin = time.perf_counter()
    for n in range(total):
        pause = begin + n * interval - time.perf_counter()
        if pause > 0:
            time.sleep(pause)
        job_id = client.enqueue(worker_bench_jobs.stamp)
        committed[job_id] = time.perf_counter()
    deadline = time.monotonic() + 30
    while len(worker_bench_jobs.started) < total and time.monotonic() < deadline:
        time.sleep(0.05)
    worker.request_stop()
    running.join(60)
    from django.db import connections

    connections[ALIAS].close()

    delays = sorted(
        (worker_bench_jobs.started[job_id] - at) * 1000
        for job_id, at in committed.items()
        if job_id in worker_bench_jobs.started
    )
    result = Pickup(
        configuration=name,
        arrivals=total,
        picked_up=len(delays),
        p50_ms=statistics.median(delays) if delays else float("nan"),
        p99_ms=delays[min(len(delays) - 1, int(len(delays) * 0.99))] if delays else float("nan"),
        max_ms=delays[-1] if delays else float("nan"),
        notifications=Capabilities.NOTIFICATIONS in store.capabilities,
    )
    print(
        f"  {name:<24} {result.picked_up}/{total} picked up  p50 {result.p50_ms:6.2f} ms  "
        f"p99 {result.p99_ms:6.2f} ms  max {result.max_ms:7.2f} ms  "
        f"notifications {'on' if result.notifications else 'off (polling)'}",
        flush=True,
    )
    return result


def judge(report: Report, quick: bool) -> None:
    default = next(d for d in report.drains if d.configuration == "default")
    best = max(report.drains, key=lambda d: d.per_second)
    checks = [
        ("default drain >= 4,500 jobs/s", default.per_second, 4_500, True),
        ("best drain >= 11,000 jobs/s", best.per_second, 11_000, True),
    ]
    default_pickup = next(p for p in report.pickups if p.configuration == "default")
    checks += [
        ("pickup p50 <= 3 ms", default_pickup.p50_ms, 3.0, False),
        ("pickup p99 <= 5 ms", default_pickup.p99_ms, 5.0, False),
    ]
    print("\ntargets" + (" (a --quick run is too small to judge them)" if quick else ""))
    for label, value, bound, at_least in checks:
        met = value >= bound if at_least else value <= bound
        verdict = "n/a" if quick else ("met" if met else "NOT met")
        print(f"  {label:<32} {value:10,.2f}  {verdict}")
        report.targets.append({"target": label, "value": value, "verdict": verdict})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small counts (under a minute)")
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    options = parser.parse_args()
    sizes = QUICK if options.quick else FULL

    url = server_url()
    name = f"millrace_worker_bench_{os.getpid()}"
    recreate_database(url, name, create=True)
    report = Report()
    try:
        setup_django(url, name)
        describe_machine(report)
        print("millrace worker bench" + (" (--quick)" if options.quick else ""))
        for key, value in {**report.machine, **report.versions}.items():
            print(f"  {key:<16} {value}")

        print(f"\ndrain: a backlog of {sizes.backlog:,} no-op jobs, one worker until idle")
        report.drains.append(drain("default", settings_with(), sizes))
        for batch, concurrency in sizes.tuned:
            tuned = settings_with(claim_batch=batch, concurrency=concurrency)
            report.drains.append(drain(f"tuned {batch}/{concurrency}", tuned, sizes))
        best = max(report.drains, key=lambda d: d.per_second)

        print(
            f"\ndrain: the same backlog, `millrace_worker --processes N` "
            f"({os.cpu_count()} CPUs here)"
        )
        bench_url = database_url(url, name)
        for processes in sizes.processes:
            report.process_drains.append(
                drain_processes("default", processes, settings_with(), sizes, bench_url)
            )
        best_processes = settings_with(claim_batch=best.claim_batch, concurrency=best.concurrency)
        report.process_drains.append(
            drain_processes(
                f"best ({best.claim_batch}/{best.concurrency})",
                max(sizes.processes),
                best_processes,
                sizes,
                bench_url,
            )
        )

        print(
            f"\npickup: {sizes.arrivals_per_second}/s single enqueues for "
            f"{sizes.arrival_seconds:g} s, commit to handler start"
        )
        report.pickups.append(pickup("default", settings_with(), sizes))
        best_config = settings_with(claim_batch=best.claim_batch, concurrency=best.concurrency)
        report.pickups.append(pickup(f"best ({best.configuration})", best_config, sizes))

        judge(report, options.quick)
        report.machine["load average at the end"] = " ".join(
            f"{value:.2f}" for value in os.getloadavg()
        )
    finally:
        from django.db import connections

        connections.close_all()
        # Dropping the database ends any wake-up listener still closing; not news.
        logging.getLogger("millrace_django").setLevel(logging.CRITICAL)
        recreate_database(url, name, create=False)
    if options.json:
        data = asdict(report)
        for key in ("drains", "process_drains"):
            for drain_result, entry in zip(getattr(report, key), data[key], strict=True):
                entry["jobs_per_second"] = round(drain_result.per_second, 1)
        Path(options.json).write_text(json.dumps(data, indent=2, default=str))


if __name__ == "__main__":
    main()
