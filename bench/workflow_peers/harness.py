"""What both workflow drivers share: the three workloads, timed by the same code.

A driver module defines ``make_peer() -> WorkflowPeer`` and ``run_worker()`` (one worker
process of its system). Each measurement starts one worker process, warms it up on a few
linear instances, then times one workload:

- ``linear`` and ``fan_out``: a backlog of instances becomes visible at once (started in
  one transaction) and the time until every one has completed is counted;
- ``signal``: a backlog of instances each waiting for one message, then (once all wait)
  one message sent per instance, one call each; the time from the first send until every
  resumed instance has completed is counted;
- ``signal_batched``: the same, the messages sent :data:`SIGNAL_BATCH` per call, by the
  systems that can (``send_many``).

Standard library only (the drivers run under two virtualenvs). The worker process comes
and goes with ``peers.harness.processes``; every loop here is bounded in count and time.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from peers.harness import check_alive, drain_poll_pause, processes

WORKLOADS = ("linear", "fan_out", "signal", "signal_batched")
STEPS = {"linear": 3, "fan_out": 10, "signal": 1, "signal_batched": 1}
SIGNAL_BATCH = 100
"""Messages per call in ``signal_batched``."""
"""Steps per instance of each workload (the signal workload's is the step after it)."""
WARM_UP_INSTANCES = 20
WORKER_READY_SECONDS = 60.0


class WorkflowPeer(Protocol):
    """One system under test, as its driver module builds it."""

    name: str
    config: str
    """What the configuration measured is, for the report."""

    def versions(self) -> dict[str, str]: ...
    def prepare(self) -> None: ...
    def clear(self) -> None: ...
    def start_backlog(self, workload: str, count: int) -> None:
        """Start ``count`` instances of ``workload`` in one transaction; the instances of
        ``signal`` are numbered from 0 (their correlation, or their id)."""

    def completed(self, workload: str) -> int: ...
    def waiting(self) -> int:
        """Instances of ``signal`` waiting for their message."""

    def send(self, number: int) -> None:
        """The message instance ``number`` of ``signal`` waits for (one call)."""

    def send_many(self, numbers: Sequence[int]) -> None:
        """The messages of instances ``numbers``, in one call (only systems offering
        that run ``signal_batched``)."""

    def worker_command(self) -> list[str]: ...


@dataclass(frozen=True)
class Spec:
    """What one ``measure`` command times (sent by ``workflow_bench.py`` as JSON)."""

    workload: str = "linear"
    instances: int = 100
    cap: float = 60.0
    log_dir: str = "."


def wait_for(
    count: int,
    read: Callable[[], int],
    cap: float,
    start: float,
    alive: Callable[[], None],
) -> tuple[int, float, bool]:
    """Poll ``read()`` until it reaches ``count`` or ``cap`` seconds after ``start``
    (pauses as ``peers.harness.drain_poll_pause``): (reached, seconds, capped)."""
    while True:
        done = read()
        elapsed = time.perf_counter() - start
        if done >= count or elapsed >= cap:
            return min(done, count), elapsed, done < count
        alive()
        time.sleep(min(drain_poll_pause(count, count - done, elapsed), cap - elapsed))


def measure_backlog(
    peer: WorkflowPeer, workload: str, count: int, cap: float, alive: Callable[[], None]
) -> dict[str, Any]:
    begin = time.perf_counter()
    peer.start_backlog(workload, count)
    start = time.perf_counter()
    done, seconds, capped = wait_for(count, lambda: peer.completed(workload), cap, start, alive)
    return {
        "instances": count,
        "done": done,
        "seconds": seconds,
        "capped": capped,
        "start_seconds": start - begin,
        "start_rate": count / (start - begin),
        "rate": done / seconds if seconds else 0.0,
        "steps_rate": done * STEPS[workload] / seconds if seconds else 0.0,
    }


def measure_signal(
    peer: WorkflowPeer, count: int, cap: float, alive: Callable[[], None], batch: int = 1
) -> dict[str, Any]:
    peer.start_backlog("signal", count)
    waiting, _, capped = wait_for(count, peer.waiting, cap, time.perf_counter(), alive)
    if capped:
        raise RuntimeError(f"only {waiting} of {count} instances waited within {cap:g} s")
    start = time.perf_counter()
    sent = 0
    while sent < count and time.perf_counter() - start < cap:
        if batch == 1:
            peer.send(sent)
        else:
            peer.send_many(range(sent, min(count, sent + batch)))
        sent = min(count, sent + batch)
    send_seconds = time.perf_counter() - start
    done, seconds, capped = wait_for(sent, lambda: peer.completed("signal"), cap, start, alive)
    return {
        "instances": count,
        "sent": sent,
        "done": done,
        "seconds": seconds,
        "capped": capped or sent < count,
        "send_seconds": send_seconds,
        "send_rate": sent / send_seconds if send_seconds else 0.0,
        "rate": done / seconds if seconds else 0.0,
        "steps_rate": done * STEPS["signal"] / seconds if seconds else 0.0,
    }


def measure(peer: WorkflowPeer, spec: Spec, label: str) -> dict[str, Any]:
    """One worker process, warmed up on linear instances, then ``spec.workload``."""
    if spec.workload not in WORKLOADS:
        raise ValueError(f"unknown workload {spec.workload!r}")
    log = Path(spec.log_dir) / f"{label}.log"
    peer.clear()
    try:
        with processes([peer.worker_command()], {}, log) as workers:

            def alive() -> None:
                check_alive(workers, log)

            peer.start_backlog("linear", WARM_UP_INSTANCES)
            _, _, capped = wait_for(
                WARM_UP_INSTANCES,
                lambda: peer.completed("linear"),
                WORKER_READY_SECONDS,
                time.perf_counter(),
                alive,
            )
            if capped:
                raise RuntimeError(f"the worker ran no warm-up within {WORKER_READY_SECONDS:g} s")
            peer.clear()
            if spec.workload == "signal":
                return measure_signal(peer, spec.instances, spec.cap, alive)
            if spec.workload == "signal_batched":
                return measure_signal(peer, spec.instances, spec.cap, alive, SIGNAL_BATCH)
            return measure_backlog(peer, spec.workload, spec.instances, spec.cap, alive)
    finally:
        peer.clear()


def main(peer: WorkflowPeer, arguments: Sequence[str]) -> None:
    """``describe | prepare | measure --spec JSON --label NAME``; prints the result as
    one JSON line."""
    parser = argparse.ArgumentParser(prog=f"workflow_peers {peer.name}")
    parser.add_argument("command", choices=("describe", "prepare", "measure"))
    parser.add_argument("--spec", default="{}")
    parser.add_argument("--label", default="run")
    options = parser.parse_args(arguments)
    result: dict[str, Any]
    if options.command == "describe":
        result = {"versions": peer.versions(), "configs": {"default": peer.config}}
    elif options.command == "prepare":
        peer.prepare()
        result = {"prepared": True}
    else:
        result = measure(peer, Spec(**json.loads(options.spec)), options.label)
    print(json.dumps(result), flush=True)
