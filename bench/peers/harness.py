"""What every peer driver shares: the measurements, worker processes and job stamps.

A driver module defines ``make_peer() -> Peer`` and the job functions its workers import.
The harness times the same workloads against each: enqueue (one job per call, and in
batches), draining a backlog with worker processes, pickup latency (commit to job start,
one job at a time into an idle worker) and recurring fire lateness. Jobs report when they
start by sending a UDP datagram (``stamp``) to the harness on loopback, so no measurement
polls a file. Standard library only: the drivers run under two different virtualenvs.
Every loop here is bounded in count and in time.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

SLEEP_SECONDS = 0.010
"""The body of the ``sleep`` job: the 10 ms workload."""
JOB_KINDS = ("noop", "sleep")
STAMP_ADDRESS = "PEER_STAMP_ADDRESS"
"""Environment variable: where a worker's jobs send their stamps (``host:port``)."""
RECURRING = "PEER_RECURRING"
"""Environment variable set (to ``1``) for the workers of a recurring measurement."""
CRON_TOKEN = "cron"
DRAIN_POLL_SECONDS = 0.02
"""Shortest pause between two counts of a drain's remaining jobs..."""
DRAIN_POLL_SHARE = 0.5
"""...and the share of the drain's expected time left it waits instead, once that is
longer (never more than half the time elapsed, while the pace is still settling). A
count is a scan of the system's table, for the systems that keep finished jobs one of
every job drained so far: counting every 20 ms would take from the database a good part
of the time being measured. Near the end the pause is back to 20 ms."""
WARM_UP_JOBS = 250
"""No-op jobs per worker process drained before the measurements (every system alike)."""
WORKER_READY_SECONDS = 60.0
STOP_SECONDS = 20.0

_stamp_socket: socket.socket | None = None


# --------------------------------------------------------------------------- job side


def stamp(token: str) -> None:
    """Tell the harness that the job ``token`` has started (wall clock, this machine)."""
    global _stamp_socket
    address = os.environ.get(STAMP_ADDRESS)
    if not address:
        return
    if _stamp_socket is None:
        _stamp_socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    host, port = address.rsplit(":", 1)
    _stamp_socket.sendto(f"{token} {time.time():.6f}".encode(), (host, int(port)))


def recurring_enabled() -> bool:
    return os.environ.get(RECURRING) == "1"


class StampListener:
    """Receives the stamps of started jobs on a loopback UDP port."""

    def __init__(self) -> None:
        self.socket = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        self.socket.bind(("127.0.0.1", 0))
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)

    @property
    def address(self) -> str:
        host, port = self.socket.getsockname()
        return f"{host}:{port}"

    def receive(self, timeout: float) -> tuple[str, float] | None:
        """The next stamp, or None once ``timeout`` seconds passed without one."""
        self.socket.settimeout(max(timeout, 0.0001))
        try:
            data = self.socket.recv(256)
        except TimeoutError:
            return None
        token, at = data.decode().split()
        return token, float(at)

    def wait_for(self, token: str, timeout: float) -> float | None:
        """When the job ``token`` started, ignoring stale stamps; None on timeout."""
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            got = self.receive(left)
            if got is not None and got[0] == token:
                return got[1]
        return None

    def close(self) -> None:
        self.socket.close()


# --------------------------------------------------------------------------- peers


class Peer(Protocol):
    """One system under test, as its driver module builds it."""

    name: str
    configs: dict[str, str]
    """Configuration name (``default``, ``best``) to what it means, for the report."""
    recurring_configs: tuple[str, ...]
    """Configurations with a recurring measurement; empty when the system has no cron."""

    def versions(self) -> dict[str, str]: ...
    def prepare(self) -> None: ...
    def open(self) -> None: ...
    def close(self) -> None: ...
    def clear(self) -> None: ...
    def enqueue_single(self, count: int) -> None: ...
    def enqueue_batched(self, count: int, batch: int) -> None: ...
    def enqueue_backlog(self, kind: str, count: int) -> None: ...
    def enqueue_stamp(self, token: str) -> None: ...
    def remaining(self) -> int: ...
    def drop_pending(self) -> None: ...
    def worker_commands(self, config: str, processes: int) -> list[list[str]]: ...
    def recurring_commands(self, config: str) -> list[list[str]]: ...


@dataclass(frozen=True)
class Spec:
    """What one driver command measures (sent by ``peer_bench.py`` as JSON)."""

    config: str = "default"
    processes: int = 1
    single: int = 0
    batched: int = 0
    batch: int = 1_000
    enqueue_cap: float = 30.0
    drains: tuple[tuple[str, int], ...] = ()
    drain_cap: float = 30.0
    pickups: int = 0
    pickup_cap: float = 10.0
    pickup_gap: float = 0.05
    recurring_seconds: float = 0.0
    log_dir: str = "."


# --------------------------------------------------------------------------- processes


def python_command(system: str, *arguments: str) -> list[str]:
    """This interpreter running ``python -m peers SYSTEM ...`` (a worker entry point)."""
    return [sys.executable, "-m", "peers", system, *arguments]


@contextlib.contextmanager
def processes(
    commands: Sequence[Sequence[str]], environment: dict[str, str], log: Path
) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Run ``commands`` (each in its own session, output to ``log``); stop them at exit:
    SIGTERM, then SIGKILL of the process group after ``STOP_SECONDS``."""
    env = {**os.environ, **environment}
    started: list[subprocess.Popen[bytes]] = []
    with log.open("ab") as output:
        try:
            for command in commands:
                started.append(
                    subprocess.Popen(
                        list(command),
                        env=env,
                        stdout=output,
                        stderr=subprocess.STDOUT,
                        stdin=subprocess.DEVNULL,
                        start_new_session=True,
                    )
                )
            yield started
        finally:
            for process in started:
                if process.poll() is None:
                    process.send_signal(signal.SIGTERM)
            deadline = time.monotonic() + STOP_SECONDS
            for process in started:
                try:
                    process.wait(max(deadline - time.monotonic(), 0.1))
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(process.pid, signal.SIGKILL)
                    process.wait(10)


def check_alive(workers: Sequence[subprocess.Popen[bytes]], log: Path) -> None:
    for process in workers:
        if process.poll() is not None:
            tail = log.read_text(errors="replace")[-1_500:] if log.exists() else ""
            raise RuntimeError(f"worker exited with {process.returncode}: {tail}")


# --------------------------------------------------------------------------- measures


def timed(function: Any, *arguments: Any) -> float:
    start = time.perf_counter()
    function(*arguments)
    return time.perf_counter() - start


def measure_enqueue(peer: Peer, spec: Spec) -> dict[str, Any]:
    """Enqueue rates without workers: one job per call, then batches of ``spec.batch``.
    A peer slower than ``enqueue_cap`` per loop is measured on fewer jobs (sized from a
    probe), never left running."""
    peer.clear()
    peer.open()
    try:
        result: dict[str, Any] = {}
        probe = max(spec.single // 20, 10)
        rate = probe / timed(peer.enqueue_single, probe)
        single = min(spec.single, max(probe, int(rate * spec.enqueue_cap)))
        seconds = timed(peer.enqueue_single, single)
        result["enqueue_single"] = {"jobs": single, "seconds": seconds, "rate": single / seconds}
        peer.clear()
        seconds = timed(peer.enqueue_batched, spec.batched, spec.batch)
        result["enqueue_batched"] = {
            "jobs": spec.batched,
            "batch": spec.batch,
            "seconds": seconds,
            "rate": spec.batched / seconds,
        }
        peer.clear()
        return result
    finally:
        peer.close()


def wait_drained(peer: Peer, count: int, cap: float, start: float) -> tuple[int, float, bool]:
    """Poll ``remaining()`` until zero or ``cap`` seconds after ``start``:
    (jobs done, seconds, capped)."""
    while True:
        left = peer.remaining()
        elapsed = time.perf_counter() - start
        if left <= 0 or elapsed >= cap:
            return count - max(left, 0), elapsed, left > 0
        time.sleep(min(drain_poll_pause(count, left, elapsed), cap - elapsed))


def drain_poll_pause(count: int, left: int, elapsed: float) -> float:
    """Seconds until the next count of a drain with ``left`` of ``count`` jobs to go
    after ``elapsed`` seconds (see :data:`DRAIN_POLL_SHARE`)."""
    done = count - left
    if done <= 0:
        return DRAIN_POLL_SECONDS
    expected_left = elapsed * left / done
    return max(DRAIN_POLL_SECONDS, min(DRAIN_POLL_SHARE * expected_left, elapsed / 2))


def measure_drain(peer: Peer, kind: str, count: int, cap: float) -> dict[str, Any]:
    """The backlog becomes visible at once (one commit); time until every job is done."""
    peer.clear()
    peer.enqueue_backlog(kind, count)
    done, seconds, capped = wait_drained(peer, count, cap, time.perf_counter())
    if capped:
        quiesce(peer)
    return {
        "jobs": count,
        "done": done,
        "seconds": seconds,
        "capped": capped,
        "rate": done / seconds if seconds else 0.0,
    }


def quiesce(peer: Peer) -> None:
    """After a capped drain: drop the jobs not started and let the running ones end
    (until nothing is left, or the count holds still for a second; at most 30 s), so
    that the next measurement never pulls rows from under a running job."""
    peer.drop_pending()
    deadline = time.monotonic() + 30.0
    last, still_since = peer.remaining(), time.monotonic()
    while last > 0 and time.monotonic() < deadline and time.monotonic() - still_since < 1.0:
        time.sleep(0.05)
        now = peer.remaining()
        if now != last:
            last, still_since = now, time.monotonic()


def percentile(values: Sequence[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, math.ceil(fraction * len(ordered)) - 1))]


def settle(peer: Peer, gap: float, slowest: float) -> None:
    """Let the worker finish the last job and go idle: wait (bounded) until nothing is
    left, then a random pause from ``gap`` to ``gap`` plus twice the slowest pickup so far
    (at most 2 s more), so that arrivals fall on every phase of a polling worker's sleep
    instead of locking onto one."""
    deadline = time.monotonic() + 5.0
    while peer.remaining() > 0 and time.monotonic() < deadline:
        time.sleep(0.002)
    time.sleep(random.uniform(gap, gap + min(max(gap, 2 * slowest), 2.0)))


def measure_pickup(peer: Peer, listener: StampListener, spec: Spec) -> dict[str, Any]:
    """One job at a time into an idle worker: from the enqueue call to the job's start
    (so the enqueue's own cost is included and no system gains by returning late),
    ``spec.pickups`` samples or ``spec.pickup_cap`` seconds, whichever ends first. The
    median from the enqueue call's return (its commit) is kept too."""
    delays: list[float] = []
    after_return: list[float] = []
    lost = 0
    deadline = time.monotonic() + spec.pickup_cap
    for n in range(spec.pickups):
        if time.monotonic() >= deadline:
            break
        token = f"pickup-{n}"
        called = time.time()
        peer.enqueue_stamp(token)
        returned = time.time()
        started = listener.wait_for(token, min(10.0, spec.pickup_cap))
        if started is None:
            lost += 1
            continue
        delays.append((started - called) * 1000)
        after_return.append((started - returned) * 1000)
        settle(peer, spec.pickup_gap, max(delays) / 1000)
    if not delays:
        return {"samples": 0, "lost": lost}
    return {
        "samples": len(delays),
        "lost": lost,
        "p50_ms": percentile(delays, 0.50),
        "p95_ms": percentile(delays, 0.95),
        "p99_ms": percentile(delays, 0.99),
        "max_ms": max(delays),
        "p50_after_return_ms": percentile(after_return, 0.50),
    }


def warm_up(
    peer: Peer, processes: int, workers: Sequence[subprocess.Popen[bytes]], log: Path
) -> None:
    """Wait until the workers run jobs: a backlog of :data:`WARM_UP_JOBS` per process
    drained, bounded in time, so that each process (not only the first to wake) has
    claimed and run jobs before anything is timed."""
    count = WARM_UP_JOBS * processes
    peer.enqueue_backlog("noop", count)
    deadline = time.monotonic() + WORKER_READY_SECONDS
    while peer.remaining() > 0:
        check_alive(workers, log)
        if time.monotonic() > deadline:
            raise RuntimeError(f"workers ran no job within {WORKER_READY_SECONDS:g} s")
        time.sleep(0.05)
    time.sleep(0.5)  # let every worker settle into its idle wait


def measure_session(peer: Peer, spec: Spec, label: str) -> dict[str, Any]:
    """Start ``spec.processes`` workers, then pickup (if asked) and the drains."""
    listener = StampListener()
    log = Path(spec.log_dir) / f"{label}.log"
    peer.clear()
    peer.open()
    try:
        commands = peer.worker_commands(spec.config, spec.processes)
        with processes(commands, {STAMP_ADDRESS: listener.address}, log) as workers:
            warm_up(peer, spec.processes, workers, log)
            result: dict[str, Any] = {}
            if spec.pickups:
                result["pickup"] = measure_pickup(peer, listener, spec)
                check_alive(workers, log)
            for kind, count in spec.drains:
                result[f"drain_{kind}"] = measure_drain(peer, kind, count, spec.drain_cap)
                check_alive(workers, log)
            return result
    finally:
        peer.clear()
        peer.close()
        listener.close()


def measure_recurring(peer: Peer, spec: Spec, label: str) -> dict[str, Any]:
    """Run the system's scheduler and workers with an every-minute cron for
    ``spec.recurring_seconds``; the lateness of each fire is its job's start minus the
    minute it was due (fires are due on whole minutes)."""
    listener = StampListener()
    log = Path(spec.log_dir) / f"{label}.log"
    peer.clear()
    begin = time.time()
    try:
        commands = peer.recurring_commands(spec.config)
        environment = {STAMP_ADDRESS: listener.address, RECURRING: "1"}
        fires: list[float] = []
        with processes(commands, environment, log) as workers:
            deadline = time.monotonic() + spec.recurring_seconds
            while (left := deadline - time.monotonic()) > 0:
                got = listener.receive(min(left, 1.0))
                if got is not None and got[0] == CRON_TOKEN:
                    fires.append(got[1])
                check_alive(workers, log)
        end = time.time()
        # Fires are due on whole minutes; count those due from 15 s after the start
        # (start-up, and catch-up fires of the minute the run began in) to 5 s before
        # the end. A fire belongs to the minute it started in (lateness under 60 s).
        first, last = math.ceil((begin + 15) / 60), math.floor((end - 5) / 60)
        counted = [at for at in fires if first <= math.floor(at / 60) <= last]
        lateness = [(at - 60 * math.floor(at / 60)) * 1000 for at in counted]
        result: dict[str, Any] = {
            "fires": len(counted),
            "due": max(last - first + 1, 0),
            "outside_window": len(fires) - len(counted),
            "lateness_ms": lateness,
        }
        if lateness:
            result.update(p50_ms=percentile(lateness, 0.5), max_ms=max(lateness))
        return result
    finally:
        peer.clear()
        listener.close()


# --------------------------------------------------------------------------- command line


def main(peer: Peer, arguments: Sequence[str]) -> None:
    """``describe | prepare | enqueue | session | recurring --spec JSON --label NAME``;
    prints the result as one JSON line."""
    parser = argparse.ArgumentParser(prog=f"peers {peer.name}")
    parser.add_argument(
        "command", choices=("describe", "prepare", "enqueue", "session", "recurring")
    )
    parser.add_argument("--spec", default="{}")
    parser.add_argument("--label", default="run")
    options = parser.parse_args(arguments)
    raw = json.loads(options.spec)
    raw["drains"] = tuple(tuple(pair) for pair in raw.get("drains", ()))
    spec = Spec(**raw)
    result: dict[str, Any]
    if options.command == "describe":
        result = {
            "versions": peer.versions(),
            "configs": peer.configs,
            "recurring_configs": list(peer.recurring_configs),
        }
    elif options.command == "prepare":
        peer.prepare()
        result = {"prepared": True}
    elif options.command == "enqueue":
        result = measure_enqueue(peer, spec)
    elif options.command == "session":
        result = measure_session(peer, spec, options.label)
    else:
        result = measure_recurring(peer, spec, options.label)
    print(json.dumps(result), flush=True)
