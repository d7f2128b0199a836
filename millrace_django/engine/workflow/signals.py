"""Delivering signals: each consumes the oldest matching wait and stores the job that
resumes its instance, in one atom with every other signal sent with it."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from uuid import UUID

from millrace_django.clock import Clock
from millrace_django.contract import BookmarkRecord, JobRecord, WorkflowInstanceRecord
from millrace_django.engine.workflow.definition import find
from millrace_django.engine.workflow.documents import check_payload
from millrace_django.engine.workflow.errors import InvalidSignalPayload
from millrace_django.engine.workflow.instance_cursor import Wait
from millrace_django.engine.workflow.jobs import Live, resume_job, waiting_at, with_cursor
from millrace_django.engine.workflow.spec import WaitForSignal
from millrace_django.engine.workflow.store import WorkflowStore
from millrace_django.observability.telemetry import carry_trace


@dataclass(frozen=True, slots=True)
class Signal:
    """One signal to deliver: its name, the correlation id its waits are keyed by, and
    the payload (a dataclass or JSON) the waiting step receives."""

    name: str
    correlation_id: str
    payload: object = None

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"a signal name must be a non-empty string; got {self.name!r}")
        if not isinstance(self.correlation_id, str):
            raise TypeError(f"a correlation id must be a string; got {self.correlation_id!r}")


def deliver(storage: WorkflowStore, clock: Clock, signals: Sequence[Signal]) -> list[bool]:
    """Whether each signal found an instance waiting, which it resumed. All in one atom
    per round: a payload that does not fit its wait raises
    :class:`~millrace_django.engine.workflow.errors.InvalidSignalPayload` and delivers
    none. A wait whose instance ended or moved on is removed, and its signal tried on
    the next matching wait in another round (each round removes one wait per signal it
    tries again, so the rounds end)."""
    resumed = [False] * len(signals)
    pending = list(range(len(signals)))
    while pending:
        delivered, again = _round(storage, clock, [signals[n] for n in pending])
        for position in delivered:
            resumed[pending[position]] = True
        pending = [pending[position] for position in again]
    return resumed


def _round(
    storage: WorkflowStore, clock: Clock, signals: Sequence[Signal]
) -> tuple[set[int], list[int]]:
    """One atom: the positions of ``signals`` delivered, and of those to try again (no
    live wait was left for them, but a stale one of their key was removed, so an older
    wait may be left). The signals of one key take its live waits in order, oldest
    first: a stale wait removed costs no signal its turn."""
    delivered: set[int] = set()
    again: list[int] = []

    def resume_jobs(
        consumed: Sequence[BookmarkRecord | None],
        instances: Mapping[UUID, WorkflowInstanceRecord],
    ) -> Sequence[JobRecord]:
        delivered.clear()  # a replayed transaction builds them again
        again.clear()
        live: dict[tuple[str, str], list[tuple[BookmarkRecord, Live, Wait]]] = {}
        stale: set[tuple[str, str]] = set()
        for n, bookmark in enumerate(consumed):
            if bookmark is None:
                continue
            key = _key(signals[n])
            running = with_cursor(instances.get(bookmark.instance_id))
            wait = waiting_at(running, bookmark)
            if running is None or wait is None:
                stale.add(key)
            else:
                live.setdefault(key, []).append((bookmark, running, wait))
        jobs = []
        now = clock.now()
        for n, signal in enumerate(signals):
            key = _key(signal)
            if not live.get(key):
                if key in stale:
                    again.append(n)
                continue
            bookmark, running, wait = live[key].pop(0)
            spec = _wait_spec(running, wait)
            payload = check_payload(spec.payload, signal.payload, signal=signal.name)
            jobs.append(resume_job(running, wait, bookmark, payload, timed_out=False, now=now))
            delivered.add(n)
        return carry_trace(jobs)

    storage.consume_bookmarks([_key(signal) for signal in signals], resume_jobs)
    return delivered, again


def _key(signal: Signal) -> tuple[str, str]:
    return signal.name, signal.correlation_id


def _wait_spec(live: Live, wait: Wait) -> WaitForSignal:
    instance, cursor = live
    definition = find(instance.definition_id, instance.definition_version, cursor.module)
    spec = definition.graph.node(wait.node).spec
    if not isinstance(spec, WaitForSignal):
        raise InvalidSignalPayload(f"node {wait.node!r} does not wait for a signal")
    return spec
