"""The peer run of ``workflow_bench.py``: Millrace beside DBOS Transact on the same
PostgreSQL server, one worker process each (see bench/README.md).

Installs DBOS into its own virtualenv (.tmp/bench-workflow-peers/venv) with
``peer_bench.install_peers``, gives each system a database of its own on the server named
by ``MILLRACE_TEST_POSTGRES_URL``, then times three workloads through the drivers in
bench/workflow_peers/ (subprocesses run by ``peer_bench.Drivers``: the project never
imports DBOS): a three-step linear workflow, a fan-out of ten steps joined, and a signal
round trip. Every figure is repeated, the systems interleaved (the order rotates every
repetition); medians and spreads are printed as Markdown. A system that fails to install
or run is reported with its error. Every subprocess is bounded in time.
"""

from __future__ import annotations

import contextlib
import os
import statistics
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from peer_bench import (
    DASH,
    Drivers,
    PeerFailure,
    Report,
    Run,
    System,
    closing_lines,
    install_peers,
    say,
    setting_lines,
    spread,
    start_report,
)
from pgserver import database_url, recreate_database, server_url
from workflow_peers.harness import WORKLOADS

BENCH = Path(__file__).resolve().parent
WORK = BENCH.parent / ".tmp" / "bench-workflow-peers"
VENV = WORK / "venv"
SYSTEMS = ("millrace", "dbos")
LABELS = {"millrace": "Millrace", "dbos": "DBOS"}
REQUIREMENTS = {"dbos": ("dbos>=3,<4",)}
"""What DBOS needs in its virtualenv (Millrace runs in the project's)."""
COMMON_REQUIREMENTS = ("psycopg[binary]",)
TITLES = {
    "linear": "linear, 3 steps",
    "fan_out": "fan-out of 10, joined",
    "signal": "signal round trip, 1 step",
    "signal_batched": "signal round trip, 100 per call",
}
BATCH_SENDERS = frozenset({"millrace"})
"""Systems that can deliver many messages in one call (DBOS sends one per call: its
``signal`` figure is its best, which ``signal_batched`` is compared with)."""


@dataclass(frozen=True)
class PeerSizes:
    """Instances per workload, the cap of each measurement, and the repetitions."""

    linear: int
    fan_out: int
    signal: int
    cap: float
    repeats: int

    def instances(self, workload: str) -> int:
        return int(getattr(self, "signal" if workload == "signal_batched" else workload))


FULL = PeerSizes(linear=2_000, fan_out=200, signal=1_000, cap=180.0, repeats=3)
QUICK = PeerSizes(linear=100, fan_out=20, signal=100, cap=30.0, repeats=1)


def run_peers(sizes: PeerSizes, systems: list[str]) -> Report:
    """Install, prepare and measure ``systems`` (of :data:`SYSTEMS`); the report of
    every repetition. Millrace alone needs no install (nor the network)."""
    url = server_url()
    report, log_dir = start_report(url, WORK, systems, asdict(sizes))
    installed = install_peers(systems, VENV, REQUIREMENTS, COMMON_REQUIREMENTS)
    for system, error in installed.items():
        report.systems[system].error = error
    drivers = Drivers(
        report, {}, log_dir, package="workflow_peers", peer_python=VENV / "bin" / "python"
    )
    with contextlib.ExitStack() as stack:
        for system in systems:
            name = f"workflow_peer_{system}_{os.getpid()}"
            recreate_database(url, name, create=True)
            stack.callback(recreate_database, url, name, create=False)
            info = report.systems[system]
            info.database_url = database_url(url, name)
            if not info.error:
                prepare(drivers, info)
        working = [s for s in systems if not report.systems[s].error]
        for repeat in range(sizes.repeats):
            shift = repeat % len(working) if working else 0
            order = working[shift:] + working[:shift]
            say(f"\nrepetition {repeat + 1}/{sizes.repeats}: {', '.join(LABELS[s] for s in order)}")
            for workload in WORKLOADS:
                for system in order:
                    if workload == "signal_batched" and system not in BATCH_SENDERS:
                        continue
                    report.runs.append(measure(drivers, sizes, system, workload, repeat))
    report.machine["load average at end"] = " ".join(f"{v:.2f}" for v in os.getloadavg())
    say(f"logs: {log_dir}")
    return report


def prepare(drivers: Drivers, info: System) -> None:
    try:
        described = drivers.call(info.name, "describe", {}, f"{info.name}-describe", timeout=120)
        info.versions = described["versions"]
        info.configs = described["configs"]
        drivers.call(info.name, "prepare", {}, f"{info.name}-prepare", timeout=300)
    except PeerFailure as error:
        info.error = str(error)
    versions = ", ".join(f"{k} {v}" for k, v in info.versions.items())
    say(f"{LABELS[info.name]}: " + (f"FAILED: {info.error}" if info.error else versions))


def measure(drivers: Drivers, sizes: PeerSizes, system: str, workload: str, repeat: int) -> Run:
    """One workload on one system: a worker process started, warmed up, timed, stopped."""
    run = Run(system, "default", workload, repeat)
    spec = {"workload": workload, "instances": sizes.instances(workload), "cap": sizes.cap}
    label = f"{system}-{workload}-r{repeat}"
    try:
        run.value = drivers.call(system, "measure", spec, label, timeout=3 * sizes.cap + 180)
    except PeerFailure as error:
        run.error = str(error)
    say(f"  {LABELS[system]:<9} {TITLES[workload]:<26} " + (run.error or summarize(run.value)))
    return run


def summarize(value: dict[str, Any] | None) -> str:
    value = value or {}
    capped = "  (capped)" if value.get("capped") else ""
    return (
        f"{value['rate']:,.1f} instances/s, {value['steps_rate']:,.0f} steps/s "
        f"({value['done']:,}/{value['instances']:,} in {value['seconds']:.2f} s){capped}"
    )


RATES = ("rate", "steps_rate", "start_rate", "send_rate")
"""The rates a measurement reports: instances/s, steps/s, and starts/s or sends/s."""


def label(system: str, workload: str) -> str:
    """The system's name in the table (DBOS's per-call figure stands beside the batched
    one as its best)."""
    if workload == "signal_batched" and system not in BATCH_SENDERS:
        return f"{LABELS[system]} (one per call, its only way)"
    return LABELS[system]


def collect(report: Report, system: str, workload: str) -> dict[str, Any]:
    """Each rate of ``system`` on ``workload`` over the repetitions that ran."""
    runs = [r for r in report.runs if (r.system, r.figure) == (system, workload)]
    values = [r.value for r in runs if r.value is not None]
    entry: dict[str, Any] = {
        "runs": len(values),
        "errors": [r.error for r in runs if r.error],
        "capped": any(v.get("capped") for v in values),
    }
    for key in RATES:
        found = [v[key] for v in values if key in v]
        if found:
            entry[key] = found
    return entry


def rate_cell(entry: dict[str, Any], key: str, digits: int = 0) -> str:
    if key not in entry:
        return "failed" if entry["errors"] or entry["failed"] else "not run"
    failed = f" ({len(entry['errors'])} failed)" if entry["errors"] else ""
    return spread(entry[key], digits) + (" ‡" if entry["capped"] else "") + failed


def markdown(report: Report, quick: bool) -> str:
    lines = [f"Workflows beside DBOS, {report.started}" + (" (--quick)" if quick else "")]
    lines += setting_lines(report, LABELS)
    sizes = report.sizes
    beside = "dbos" in report.systems and len(report.systems) > 1
    lines += [
        "",
        f"One worker process each; median (min{DASH}max) of {sizes['repeats']} "
        f"repetition(s); ‡ = a measurement hit its cap of {sizes['cap']:g} s (rate over the "
        f"instances done by then). Instances: linear {sizes['linear']:,}, fan-out "
        f"{sizes['fan_out']:,}, signal {sizes['signal']:,}.",
        "",
        "| workload | system | instances/s | steps/s | started (one commit) or sent, per s |"
        + (" instances/s vs DBOS |" if beside else ""),
        "|---|---|---|---|---|" + ("---|" if beside else ""),
    ]
    for workload in WORKLOADS:
        entries = {
            s: {**collect(report, s, workload), "failed": bool(info.error)}
            for s, info in report.systems.items()
            if workload != "signal_batched" or s in BATCH_SENDERS
        }
        if "dbos" in report.systems and "dbos" not in entries:  # its best: one per call
            entries["dbos"] = {
                **collect(report, "dbos", "signal"),
                "failed": bool(report.systems["dbos"].error),
            }
        for system, entry in entries.items():
            extra = "send_rate" if workload.startswith("signal") else "start_rate"
            lines.append(
                f"| {TITLES[workload]} | {label(system, workload)} | "
                f"{rate_cell(entry, 'rate', 1)} | {rate_cell(entry, 'steps_rate')} | "
                f"{rate_cell(entry, extra)} |"
                + (
                    f" {ratio(entry, entries['dbos']) if system != 'dbos' else ''} |"
                    if beside
                    else ""
                )
            )
    lines += closing_lines(report, LABELS, TITLES)
    return "\n".join(lines)


def ratio(entry: dict[str, Any], other: dict[str, Any]) -> str:
    if "rate" not in entry or "rate" not in other:
        return ""
    return f"{statistics.median(entry['rate']) / statistics.median(other['rate']):.2f}x"


def json_report(report: Report) -> dict[str, Any]:
    """The report with every repetition's measurement and, per workload and system, the
    median, min and max of each rate."""
    data = asdict(report)
    for info in data["systems"].values():
        info.pop("database_url", None)
    data["medians"] = {
        workload: {
            system: {
                key: {"median": statistics.median(found), "min": min(found), "max": max(found)}
                if key in RATES
                else found
                for key, found in collect(report, system, workload).items()
            }
            for system in report.systems
        }
        for workload in WORKLOADS
    }
    return data
