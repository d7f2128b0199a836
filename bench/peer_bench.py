"""Peer benchmark: Millrace beside procrastinate, django-tasks-db, pgqueuer, Celery (on a
local Redis, with and without persistence) and a raw-SQL bound, on one PostgreSQL server
(see bench/README.md).

Installs the peers into their own virtualenv (.tmp/bench-peers/venv), starts a Redis
server for each Celery system, gives each system a database of its own on the server named by
``MILLRACE_TEST_POSTGRES_URL``, then runs the same workloads against each through its
driver in bench/peers/ (a subprocess: the project never imports a peer): enqueue one job
per call and in batches, drain a backlog of no-op and of 10 ms jobs with 1 and 4 worker
processes, pickup latency into an idle worker, and the lateness of every-minute cron
fires. Systems are interleaved (the order rotates every repetition), every figure is
repeated, and the median and spread are printed as Markdown and written as JSON to
.tmp/bench-peers/results.json. A peer that fails to install or run is reported with its
error, never left out. Every loop and subprocess is bounded in count and time.

    make bench-peers                                      # throwaway servers, full run
    eval "$(scripts/testdb.sh start)"; .venv/bin/python bench/peer_bench.py [--quick]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from pgserver import admin_connection, server_url
from psycopg import sql as pgsql

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
WORK = REPO / ".tmp" / "bench-peers"
PEER_VENV = WORK / "venv"
PEER_PYTHON = PEER_VENV / "bin" / "python"

SYSTEMS = (
    "millrace",
    "procrastinate",
    "tasksdb",
    "pgqueuer",
    "celery",
    "celery_durable",
    "rawsql",
)
LABELS = {
    "millrace": "Millrace",
    "procrastinate": "procrastinate",
    "tasksdb": "django-tasks-db",
    "pgqueuer": "pgqueuer",
    "celery": "Celery + Redis",
    "celery_durable": "Celery + durable Redis",
    "rawsql": "raw SQL bound",
}
COMMON_REQUIREMENTS = ("Django>=6.1,<6.2", "psycopg[binary]")
REQUIREMENTS = {
    "procrastinate": ("procrastinate",),
    "tasksdb": ("django-tasks-db",),
    "pgqueuer": ("pgqueuer", "asyncpg"),
    "celery": ("celery[redis]",),
    "celery_durable": ("celery[redis]",),
    "rawsql": (),
}
"""What each peer needs in the peers' virtualenv (Millrace runs in the project's)."""
REDIS_BROKERS = {"celery": False, "celery_durable": True}
"""The systems on a Redis of their own, and whether it is durable: one that makes every
write durable before it answers, as PostgreSQL's defaults make every commit (an
append-only file, fsynced on every write: ``appendfsync always``), or one without
persistence."""
INSTALL_SECONDS = 600
PROCESS_COUNTS = (1, 4)
DASH = "\u2013"


@dataclass(frozen=True)
class Sizes:
    single: int
    batched: int
    batch: int
    drain_noop: int
    drain_sleep: int
    drain_cap: float
    pickups: int
    pickup_cap: float
    enqueue_cap: float
    repeats: int
    recurring_seconds: float


FULL = Sizes(
    single=2_000,
    batched=10_000,
    batch=1_000,
    drain_noop=30_000,
    drain_sleep=20_000,
    drain_cap=8.0,
    pickups=100,
    pickup_cap=8.0,
    enqueue_cap=8.0,
    repeats=3,
    recurring_seconds=190.0,
)
QUICK = Sizes(
    single=300,
    batched=2_000,
    batch=500,
    drain_noop=2_000,
    drain_sleep=300,
    drain_cap=5.0,
    pickups=20,
    pickup_cap=4.0,
    enqueue_cap=4.0,
    repeats=1,
    recurring_seconds=80.0,
)


class PeerFailure(RuntimeError):
    """A driver command failed: the message is what the table shows."""


@dataclass
class System:
    name: str
    versions: dict[str, str] = field(default_factory=dict)
    configs: dict[str, str] = field(default_factory=dict)
    recurring_configs: list[str] = field(default_factory=list)
    error: str | None = None
    database_url: str = ""


@dataclass
class Run:
    """One measurement: a figure of one system and configuration in one repetition."""

    system: str
    config: str
    figure: str
    repeat: int
    value: dict[str, Any] | None = None
    error: str | None = None


@dataclass
class Report:
    started: str = ""
    machine: dict[str, Any] = field(default_factory=dict)
    sizes: dict[str, Any] = field(default_factory=dict)
    systems: dict[str, System] = field(default_factory=dict)
    runs: list[Run] = field(default_factory=list)
    summary: list[dict[str, Any]] = field(default_factory=list)


# --------------------------------------------------------------------------- set-up


def say(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def install_peers(
    systems: list[str],
    venv: Path = PEER_VENV,
    requirements: Mapping[str, Sequence[str]] = REQUIREMENTS,
    common: Sequence[str] = COMMON_REQUIREMENTS,
) -> dict[str, str]:
    """Create the virtualenv ``venv`` if needed and install each peer's requirements
    (``common`` and its own) separately, so that one failing install does not stop the
    others: system -> error. workflow_bench.py installs its peers through it too."""
    errors: dict[str, str] = {}
    wanted = [s for s in systems if s in requirements]
    if not wanted:
        return errors
    python = venv / "bin" / "python"
    if not python.exists():
        say(f"creating {venv}")
        base = getattr(sys, "_base_executable", sys.executable)
        subprocess.run([base, "-m", "venv", str(venv)], check=True, timeout=INSTALL_SECONDS)
    for system in wanted:
        command = [
            str(python),
            "-m",
            "pip",
            "install",
            "-q",
            "--disable-pip-version-check",
            *common,
            *requirements[system],
        ]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=INSTALL_SECONDS)
        except subprocess.TimeoutExpired:
            errors[system] = f"pip install timed out after {INSTALL_SECONDS} s"
            continue
        if done.returncode != 0:
            errors[system] = "pip install failed: " + done.stderr.strip()[-600:]
    return errors


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def ensure_redis() -> str:
    """The redis-server binary, installed from Debian if missing and we may."""
    found = shutil.which("redis-server")
    if found:
        return found
    if os.geteuid() == 0 and shutil.which("apt-get"):
        say("installing redis-server")
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        subprocess.run(
            ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "redis-server"],
            env=env,
            capture_output=True,
            timeout=INSTALL_SECONDS,
        )
    found = shutil.which("redis-server")
    if not found:
        raise PeerFailure("redis-server is not installed (apt-get install redis-server)")
    return found


@contextlib.contextmanager
def redis_server(*, durable: bool) -> Iterator[str]:
    """A throwaway Redis on a free loopback port, stopped at exit: without persistence,
    or ``durable``, with an append-only file fsynced before each write is answered."""
    binary = ensure_redis()
    port = free_port()
    with tempfile.TemporaryDirectory(dir=WORK) as directory:
        process = subprocess.Popen(
            [
                binary,
                "--port",
                str(port),
                "--bind",
                "127.0.0.1",
                "--dir",
                directory,
                "--save",
                "",
                "--appendonly",
                "yes" if durable else "no",
                "--appendfsync",  # how often the append-only file is synced, if kept
                "always",
                "--daemonize",
                "no",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 20
            while True:
                with (
                    contextlib.suppress(OSError),
                    socket.create_connection(("127.0.0.1", port), timeout=1) as conn,
                ):
                    conn.sendall(b"PING\r\n")
                    if conn.recv(16).startswith(b"+PONG"):
                        break
                if time.monotonic() > deadline or process.poll() is not None:
                    raise PeerFailure("redis-server did not start")
                time.sleep(0.1)
            yield f"redis://127.0.0.1:{port}/0"
        finally:
            process.terminate()
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(10)


def database_url(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{name}"))


def recreate_database(url: str, name: str, *, create: bool) -> None:
    with admin_connection(url) as conn:
        conn.execute(
            pgsql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(pgsql.Identifier(name))
        )
        if create:
            conn.execute(pgsql.SQL("CREATE DATABASE {}").format(pgsql.Identifier(name)))


def describe_machine(url: str) -> dict[str, Any]:
    model = "?"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    with admin_connection(url) as conn:
        server = conn.execute("SHOW server_version").fetchone()
        settings = conn.execute(
            "SELECT name, setting FROM pg_settings WHERE name IN "
            "('fsync', 'synchronous_commit', 'full_page_writes', 'max_connections') ORDER BY name"
        ).fetchall()
    return {
        "platform": platform.platform(),
        "cpu": model,
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "postgresql": f"{server[0] if server else '?'} on loopback ("
        + ", ".join(f"{name}={value}" for name, value in settings)
        + ")",
        "load average at start": " ".join(f"{value:.2f}" for value in os.getloadavg()),
    }


# --------------------------------------------------------------------------- drivers


class Drivers:
    """Runs ``python -m PACKAGE SYSTEM COMMAND`` with the right interpreter and settings:
    the project's for Millrace, ``peer_python`` for the others (``PACKAGE`` is ``peers``
    here, ``workflow_peers`` for workflow_bench.py); ``redis_urls`` names each Celery
    system's broker."""

    def __init__(
        self,
        report: Report,
        redis_urls: Mapping[str, str],
        log_dir: Path,
        *,
        package: str = "peers",
        peer_python: Path = PEER_PYTHON,
    ) -> None:
        self.report = report
        self.redis_urls = redis_urls
        self.log_dir = log_dir
        self.package = package
        self.peer_python = peer_python

    def call(
        self,
        system: str,
        command: str,
        spec: dict[str, Any],
        label: str,
        timeout: float,
        database: str | None = None,
    ) -> dict[str, Any]:
        python = sys.executable if system == "millrace" else str(self.peer_python)
        path = f"{BENCH}{os.pathsep}{REPO}" if system == "millrace" else str(BENCH)
        env = {
            **os.environ,
            "PYTHONPATH": path,
            "PEER_SYSTEM": system,
            "PEER_DB_URL": database or self.report.systems[system].database_url,
            "PEER_REDIS_URL": self.redis_urls.get(system, ""),
            "PEER_TMP": str(self.log_dir),
            "DJANGO_SETTINGS_MODULE": "peers.django_settings",
        }
        spec = {**spec, "log_dir": str(self.log_dir)}
        try:
            done = subprocess.run(
                [
                    python,
                    "-m",
                    self.package,
                    system,
                    command,
                    "--spec",
                    json.dumps(spec),
                    "--label",
                    label,
                ],
                cwd=BENCH,
                env=env,
                capture_output=True,
                text=True,
                timeout=timeout,
            )
        except subprocess.TimeoutExpired as error:
            raise PeerFailure(f"{command} timed out after {timeout:g} s") from error
        with (self.log_dir / f"{label}.driver.log").open("a") as log:
            log.write(done.stdout + done.stderr)
        if done.returncode != 0:
            lines = [line for line in done.stderr.strip().splitlines() if line.strip()]
            raise PeerFailure(" / ".join(lines[-3:])[-500:] or f"exit {done.returncode}")
        return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def measure(report: Report, drivers: Drivers, sizes: Sizes, system: str, repeat: int) -> None:
    """One repetition of every figure of ``system``: enqueue, then a session of workers
    per configuration and process count (pickup with one process, then the drains)."""
    info = report.systems[system]

    def record(config: str, figure: str, value: dict[str, Any] | None, error: str | None) -> None:
        report.runs.append(Run(system, config, figure, repeat, value, error))
        shown = error or summarize(figure, value or {})
        say(f"  {LABELS[system]:<16} {config:<8} {figure:<16} {shown}")

    spec: dict[str, Any] = {
        "single": sizes.single,
        "batched": sizes.batched,
        "batch": sizes.batch,
        "enqueue_cap": sizes.enqueue_cap,
    }
    first = next(iter(info.configs))
    try:
        result = drivers.call(
            system,
            "enqueue",
            spec,
            f"{system}-enqueue-r{repeat}",
            timeout=6 * sizes.enqueue_cap + 120,
        )
        for figure in ("enqueue_single", "enqueue_batched"):
            record(first, figure, result[figure], None)
    except PeerFailure as error:
        for figure in ("enqueue_single", "enqueue_batched"):
            record(first, figure, None, str(error))
    for config in info.configs:
        for processes in PROCESS_COUNTS:
            spec = {
                "config": config,
                "processes": processes,
                "drains": [["noop", sizes.drain_noop], ["sleep", sizes.drain_sleep]],
                "drain_cap": sizes.drain_cap,
                "pickups": sizes.pickups if processes == 1 else 0,
                "pickup_cap": sizes.pickup_cap,
            }
            figures = [f"drain_noop_{processes}", f"drain_sleep_{processes}"]
            if processes == 1:
                figures.insert(0, "pickup")
            label = f"{system}-{config}-{processes}p-r{repeat}"
            try:
                result = drivers.call(
                    system,
                    "session",
                    spec,
                    label,
                    timeout=4 * sizes.drain_cap + 2 * sizes.pickup_cap + 180,
                )
            except PeerFailure as error:
                for figure in figures:
                    record(config, figure, None, str(error))
                continue
            for figure in figures:
                source = figure.rsplit("_", 1)[0] if figure.startswith("drain") else figure
                record(config, figure, result[source], None)


def measure_recurring(
    report: Report, drivers: Drivers, sizes: Sizes, systems: list[str], stack: contextlib.ExitStack
) -> None:
    """Every system with cron, every recurring configuration, side by side for
    ``sizes.recurring_seconds`` (all idle but for one fire a minute). A system's second
    configuration gets a database of its own: two schedulers sharing one would split
    the fires between them (once per occurrence, as they should)."""
    jobs = [(s, c) for s in systems for c in report.systems[s].recurring_configs]
    if not jobs:
        return
    databases: dict[tuple[str, str], str | None] = {}
    for system, config in jobs:
        info = report.systems[system]
        if config == info.recurring_configs[0]:
            databases[system, config] = None
            continue
        server = server_url()
        name = f"{urlsplit(info.database_url).path.lstrip('/')}_{config}"
        recreate_database(server, name, create=True)
        stack.callback(recreate_database, server, name, create=False)
        databases[system, config] = database_url(info.database_url, name)
        drivers.call(
            system,
            "prepare",
            {},
            f"{system}-{config}-prepare",
            timeout=300,
            database=databases[system, config],
        )
    say(
        f"\nrecurring: every-minute cron for {sizes.recurring_seconds:g} s, "
        + ", ".join(f"{LABELS[s]} {c}" for s, c in jobs)
    )
    results: dict[tuple[str, str], Run] = {}

    def one(system: str, config: str) -> None:
        run = Run(system, config, "recurring", 0)
        try:
            run.value = drivers.call(
                system,
                "recurring",
                {"config": config, "recurring_seconds": sizes.recurring_seconds},
                f"{system}-{config}-recurring",
                timeout=sizes.recurring_seconds + 120,
                database=databases[system, config],
            )
        except PeerFailure as error:
            run.error = str(error)
        results[system, config] = run

    threads = [threading.Thread(target=one, args=job) for job in jobs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(sizes.recurring_seconds + 180)
    for system, config in jobs:
        run = results.get((system, config)) or Run(
            system, config, "recurring", 0, None, "no result"
        )
        report.runs.append(run)
        say(
            f"  {LABELS[system]:<16} {config:<8} recurring        "
            + (run.error or summarize("recurring", run.value or {}))
        )


# --------------------------------------------------------------------------- report

FIGURES = {
    "enqueue_single": "enqueue, 1 per call (jobs/s)",
    "enqueue_batched": "enqueue, batched (jobs/s)",
    "drain_noop_1": "drain no-op, 1 process (jobs/s)",
    "drain_noop_4": "drain no-op, 4 processes (jobs/s)",
    "drain_sleep_1": "drain 10 ms, 1 process (jobs/s)",
    "drain_sleep_4": "drain 10 ms, 4 processes (jobs/s)",
    "pickup": "pickup p50 / p95 / p99 (ms)",
    "recurring": "cron lateness p50 / max (ms), fires/due",
}
THROUGHPUT = (
    "enqueue_single",
    "enqueue_batched",
    "drain_noop_1",
    "drain_noop_4",
    "drain_sleep_1",
    "drain_sleep_4",
)


def summarize(figure: str, value: dict[str, Any]) -> str:
    if figure == "pickup":
        if not value.get("samples"):
            return f"no job picked up ({value.get('lost', 0)} lost)"
        return (
            f"p50 {value['p50_ms']:.2f}  p95 {value['p95_ms']:.2f}  p99 {value['p99_ms']:.2f} ms"
            f"  ({value['samples']} samples, {value['lost']} lost)"
        )
    if figure == "recurring":
        if not value.get("fires"):
            return f"no fire ({value.get('due', 0)} due)"
        return (
            f"p50 {value['p50_ms']:.0f}  max {value['max_ms']:.0f} ms"
            f"  ({value['fires']} fires, {value['due']} due)"
        )
    capped = "  (capped)" if value.get("capped") else ""
    return f"{value['rate']:,.0f} jobs/s{capped}"


def spread(values: list[float], digits: int = 0) -> str:
    """Median (min to max) of the repetitions."""
    text = f"{statistics.median(values):,.{digits}f}"
    if len(values) > 1:
        text += f" ({min(values):,.{digits}f}{DASH}{max(values):,.{digits}f})"
    return text


def cell(report: Report, system: str, config: str, figure: str) -> tuple[str, dict[str, Any]]:
    runs = [r for r in report.runs if (r.system, r.config, r.figure) == (system, config, figure)]
    entry: dict[str, Any] = {"system": system, "config": config, "figure": figure}
    if not runs:
        return "", entry
    values = [r.value for r in runs if r.value is not None]
    errors = [r.error for r in runs if r.error]
    entry["errors"] = errors
    if not values:
        return "failed", entry
    failed = f" ({len(errors)} failed)" if errors else ""
    if figure == "pickup":
        sampled = [v for v in values if v.get("samples")]
        if not sampled:
            return "no pickup", entry
        parts = {q: [v[f"{q}_ms"] for v in sampled] for q in ("p50", "p95", "p99")}
        entry.update({f"{q}_ms": statistics.median(parts[q]) for q in parts})
        entry["spread_ms"] = {q: [min(parts[q]), max(parts[q])] for q in parts}
        text = " / ".join(spread(parts[q], 2 if q == "p50" else 1) for q in parts)
        return text + failed, entry
    if figure == "recurring":
        value = values[0]
        entry.update(value)
        if not value.get("fires"):
            return f"no fire of {value.get('due', 0)} due", entry
        return (
            f"{value['p50_ms']:,.0f} / {value['max_ms']:,.0f}, {value['fires']}/{value['due']}",
            entry,
        )
    rates = [v["rate"] for v in values]
    entry.update(median=statistics.median(rates), min=min(rates), max=max(rates), runs=len(rates))
    capped = " ‡" if any(v.get("capped") for v in values) else ""
    return spread(rates) + capped + failed, entry


def table(report: Report, figures: tuple[str, ...]) -> list[str]:
    header = "| system | configuration | " + " | ".join(FIGURES[f] for f in figures) + " |"
    lines = [header, "|" + "---|" * (len(figures) + 2)]
    for system, info in report.systems.items():
        if info.error:
            lines.append(
                f"| {LABELS[system]} | — | " + " | ".join("failed" for _ in figures) + " |"
            )
            continue
        for config in info.configs:
            cells = []
            for figure in figures:
                text, entry = cell(report, system, config, figure)
                if figure == "recurring" and config not in info.recurring_configs:
                    text = "(as default)" if info.recurring_configs else "n/a"
                if figure.startswith("enqueue") and not text:
                    text = "(as default)"
                if not text:
                    text = "not run"
                cells.append(text)
                if text not in ("not run", "n/a", "(as default)"):
                    report.summary.append(entry)
            lines.append(f"| {LABELS[system]} | {config} | " + " | ".join(cells) + " |")
    return lines


def setting_lines(report: Report, labels: Mapping[str, str]) -> list[str]:
    """The machine, then each system's versions (or why it failed), as a Markdown list."""
    lines = [f"- {key}: {value}" for key, value in report.machine.items()]
    for system, info in report.systems.items():
        versions = ", ".join(f"{k} {v}" for k, v in info.versions.items())
        lines.append(
            f"- {labels[system]}: {versions or '?'}"
            + (f" — FAILED: {info.error}" if info.error else "")
        )
    return lines


def closing_lines(
    report: Report, labels: Mapping[str, str], titles: Mapping[str, str] | None = None
) -> list[str]:
    """What each configuration means, then every failed measurement with its error
    (a figure named by ``titles``, if given)."""
    lines = ["", "Configurations:"]
    for system, info in report.systems.items():
        for config, meaning in info.configs.items():
            lines.append(f"- {labels[system]} {config}: {meaning}")
    errors = [r for r in report.runs if r.error]
    if errors:
        lines += ["", "Failures:"]
        lines += [
            f"- {labels[r.system]} {r.config} {(titles or {}).get(r.figure, r.figure)} "
            f"(repeat {r.repeat}): {r.error}"
            for r in errors
        ]
    return lines


def markdown(report: Report, quick: bool) -> str:
    lines = [f"Peer benchmark, {report.started}" + (" (--quick)" if quick else "")]
    lines += setting_lines(report, LABELS)
    lines += [
        "",
        f"Throughput, median (min{DASH}max) of the repetitions; ‡ = a drain hit its cap "
        f"of {report.sizes['drain_cap']:g} s (rate over the jobs done by then):",
        "",
    ]
    lines += table(report, THROUGHPUT)
    lines += [
        "",
        "Latency: pickup is enqueue call to job start, one job at a time into an idle "
        "worker (median of each repetition's percentile); cron lateness is job start minus "
        "the whole minute it was due, over every fire:",
        "",
    ]
    lines += table(report, ("pickup", "recurring"))
    lines += closing_lines(report, LABELS)
    return "\n".join(lines)


# --------------------------------------------------------------------------- main


def chosen_systems(parser: argparse.ArgumentParser, text: str, known: Sequence[str]) -> list[str]:
    """The systems of the comma-separated ``text``, in its order; exits with a usage
    error on a name not ``known``."""
    systems = [s.strip() for s in text.split(",") if s.strip()]
    unknown = sorted(set(systems) - set(known))
    if unknown:
        parser.error(f"unknown systems: {', '.join(unknown)}")
    return systems


def start_report(
    url: str, work: Path, systems: list[str], sizes: dict[str, Any]
) -> tuple[Report, Path]:
    """A report of ``systems`` on this machine and the server ``url``, and a new
    directory under ``work`` for the drivers' and workers' logs."""
    work.mkdir(parents=True, exist_ok=True)
    log_dir = Path(tempfile.mkdtemp(prefix="logs-", dir=work))
    report = Report(started=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), sizes=sizes)
    report.machine = describe_machine(url)
    report.systems = {s: System(s) for s in systems}
    return report, log_dir


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, one repetition")
    parser.add_argument(
        "--systems", default=",".join(SYSTEMS), help=f"comma-separated, from {','.join(SYSTEMS)}"
    )
    parser.add_argument("--repeats", type=int, help="repetitions (default 3, 1 with --quick)")
    parser.add_argument("--no-recurring", action="store_true", help="skip the cron measurement")
    parser.add_argument("--json", default=str(WORK / "results.json"), metavar="PATH")
    options = parser.parse_args()
    systems = chosen_systems(parser, options.systems, SYSTEMS)
    sizes = QUICK if options.quick else FULL
    if options.repeats:
        sizes = Sizes(**{**asdict(sizes), "repeats": options.repeats})

    url = server_url()
    report, log_dir = start_report(url, WORK, systems, asdict(sizes))
    for system, error in install_peers(systems).items():
        report.systems[system].error = error
    names = {s: f"peer_{s}_{os.getpid()}" for s in systems}
    stack = contextlib.ExitStack()
    with stack:
        redis_urls: dict[str, str] = {}
        for system, durable in REDIS_BROKERS.items():
            if system in systems and not report.systems[system].error:
                try:
                    redis_urls[system] = stack.enter_context(redis_server(durable=durable))
                except PeerFailure as error:
                    report.systems[system].error = str(error)
        drivers = Drivers(report, redis_urls, log_dir)
        for system in systems:
            recreate_database(url, names[system], create=True)
            stack.callback(recreate_database, url, names[system], create=False)
            info = report.systems[system]
            info.database_url = database_url(url, names[system])
            if info.error:
                continue
            try:
                described = drivers.call(system, "describe", {}, f"{system}-describe", timeout=120)
                info.versions = described["versions"]
                info.configs = described["configs"]
                info.recurring_configs = described["recurring_configs"]
                drivers.call(system, "prepare", {}, f"{system}-prepare", timeout=300)
            except PeerFailure as error:
                info.error = str(error)
            say(
                f"{LABELS[system]}: "
                + (
                    f"FAILED: {info.error}"
                    if info.error
                    else ", ".join(f"{k} {v}" for k, v in info.versions.items())
                )
            )
        working = [s for s in systems if not report.systems[s].error]
        for repeat in range(sizes.repeats):
            order = (
                working[repeat % len(working) :] + working[: repeat % len(working)]
                if working
                else []
            )
            say(f"\nrepetition {repeat + 1}/{sizes.repeats}: {', '.join(LABELS[s] for s in order)}")
            for system in order:
                measure(report, drivers, sizes, system, repeat)
        if not options.no_recurring:
            measure_recurring(report, drivers, sizes, working, stack)
    report.machine["load average at end"] = " ".join(f"{value:.2f}" for value in os.getloadavg())
    text = markdown(report, options.quick)
    print(text, flush=True)
    data = asdict(report)
    for info in data["systems"].values():
        info.pop("database_url", None)
    Path(options.json).parent.mkdir(parents=True, exist_ok=True)
    Path(options.json).write_text(json.dumps(data, indent=2, default=str))
    say(f"\nJSON: {options.json}; logs: {log_dir}")


if __name__ == "__main__":
    main()
