"""An instance's cursor: where it is, which no single job knows.

- ``jobs``: every pending job of the instance by id (kind, node, scope, loop index); a
  job that is not listed any more (its instance cancelled, failed or moved on) runs no
  code at all;
- ``waits``: signal waits by bookmark id (node, scope, loop index, timeout job);
- ``frames``: open joins (parallel, for-each: branches still running) and sagas (their
  undo stack), each pointing at its enclosing frame (``None``: the workflow itself);
- ``stuck``: failures waiting for an operator, by the dead job's id;
- ``done``: nodes finished at least once (the live view), ``error`` the last failure;
- ``module``, ``queue``, ``retry`` and ``limits``: where the definition lives and the
  defaults of the instance's jobs, fixed at start.

Frozen records, read from the instance's JSON where the engine reads an instance
(:func:`cursor_of`) and written back as JSON where it builds the instance record to
checkpoint (:meth:`Cursor.to_json`). The JSON is the stored format: each record writes
the keys it was read from, in the same order, so a stored cursor reads and writes back
unchanged; storage never looks inside it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from typing import Any, cast

from millrace_django.contract import (
    JSON,
    Limit,
    RetrySpec,
    WorkflowInstanceRecord,
    limits_json,
    limits_of,
    retry_json,
    retry_of,
)
from millrace_django.engine.workflow.spec import Nested

type Stored = Mapping[str, Any]
"""A record's JSON as read back (keys and values as :meth:`to_json` wrote them)."""


class JobKind(StrEnum):
    """What a pending job of the instance does."""

    STEP = "step"
    COMPENSATE = "compensate"
    DELAY = "delay"
    TIMEOUT = "timeout"
    """A signal wait's timer: it consumes the wait's bookmark if no signal did."""


@dataclass(frozen=True, slots=True, kw_only=True)
class PendingJob:
    """A job the instance waits on, at ``node`` in the frame ``scope``."""

    kind: JobKind
    node: str
    scope: str | None
    loop: int | None
    bookmark: str | None = None
    """A timeout's wait (its bookmark id)."""

    @classmethod
    def from_json(cls, stored: Stored) -> PendingJob:
        return cls(
            kind=JobKind(stored["kind"]),
            node=stored["node"],
            scope=stored["scope"],
            loop=stored["loop"],
            bookmark=stored.get("bookmark"),
        )

    def to_json(self) -> dict[str, JSON]:
        written: dict[str, JSON] = {
            "kind": self.kind.value,
            "node": self.node,
            "scope": self.scope,
            "loop": self.loop,
        }
        if self.bookmark is not None:
            written["bookmark"] = self.bookmark
        return written


@dataclass(frozen=True, slots=True, kw_only=True)
class Wait:
    """A signal wait at ``node``; ``timeout`` is its timer job's id, if it has one."""

    node: str
    scope: str | None
    loop: int | None
    signal: str
    correlation: str
    timeout: str | None

    @classmethod
    def from_json(cls, stored: Stored) -> Wait:
        return cls(
            node=stored["node"],
            scope=stored["scope"],
            loop=stored["loop"],
            signal=stored["signal"],
            correlation=stored["correlation"],
            timeout=stored["timeout"],
        )

    def to_json(self) -> dict[str, JSON]:
        return {
            "node": self.node,
            "scope": self.scope,
            "loop": self.loop,
            "signal": self.signal,
            "correlation": self.correlation,
            "timeout": self.timeout,
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class JoinFrame:
    """A parallel or for-each node whose ``remaining`` branches still run."""

    node: str
    parent: str | None
    loop: int | None
    seq: int
    remaining: int

    @classmethod
    def from_json(cls, stored: Stored) -> JoinFrame:
        return cls(
            node=stored["node"],
            parent=stored["parent"],
            loop=stored["loop"],
            seq=stored["seq"],
            remaining=stored["remaining"],
        )

    def to_json(self) -> dict[str, JSON]:
        return {
            "kind": "join",
            "node": self.node,
            "parent": self.parent,
            "loop": self.loop,
            "seq": self.seq,
            "remaining": self.remaining,
        }


class SagaState(StrEnum):
    OPEN = "open"
    COMPENSATING = "compensating"
    CLOSED = "closed"


@dataclass(frozen=True, slots=True, kw_only=True)
class SagaFrame:
    """A saga and its undo stack: the steps it completed, ``(node, loop)``, oldest first."""

    node: str
    parent: str | None
    loop: int | None
    seq: int
    completed: tuple[tuple[str, int | None], ...]
    state: SagaState
    nested: Nested | None
    """What its commit means to the saga around it (``None``: no saga is)."""

    @classmethod
    def from_json(cls, stored: Stored) -> SagaFrame:
        return cls(
            node=stored["node"],
            parent=stored["parent"],
            loop=stored["loop"],
            seq=stored["seq"],
            completed=tuple((node, loop) for node, loop in stored["completed"]),
            state=SagaState(stored["state"]),
            nested=Nested(stored["nested"]) if stored["nested"] is not None else None,
        )

    def to_json(self) -> dict[str, JSON]:
        return {
            "kind": "saga",
            "node": self.node,
            "parent": self.parent,
            "loop": self.loop,
            "seq": self.seq,
            "completed": [[node, loop] for node, loop in self.completed],
            "state": self.state.value,
            "nested": self.nested.value if self.nested is not None else None,
        }


type Frame = JoinFrame | SagaFrame


def frame_of(stored: Stored) -> Frame:
    """A frame from its JSON (its ``kind`` says which)."""
    return SagaFrame.from_json(stored) if stored["kind"] == "saga" else JoinFrame.from_json(stored)


class StuckKind(StrEnum):
    STEP = "step"
    """A step whose failure policy is to suspend."""
    COMPENSATION = "compensation"


@dataclass(frozen=True, slots=True, kw_only=True)
class StuckJob:
    """A failure waiting for an operator, where the dead job stood."""

    kind: StuckKind
    node: str
    scope: str | None
    loop: int | None
    error: str | None
    at: datetime

    @classmethod
    def from_json(cls, stored: Stored) -> StuckJob:
        return cls(
            kind=StuckKind(stored["kind"]),
            node=stored["node"],
            scope=stored["scope"],
            loop=stored["loop"],
            error=stored["error"],
            at=datetime.fromisoformat(stored["at"]),
        )

    def to_json(self) -> dict[str, JSON]:
        return {
            "kind": self.kind.value,
            "node": self.node,
            "scope": self.scope,
            "loop": self.loop,
            "error": self.error,
            "at": self.at.isoformat(),
        }


@dataclass(frozen=True, slots=True, kw_only=True)
class LastError:
    """The last failure: the node it happened at (``None``: no node, the definition
    itself is missing) and its error."""

    node: str | None
    error: str | None

    @classmethod
    def from_json(cls, stored: Stored) -> LastError:
        return cls(node=stored["node"], error=stored["error"])

    def to_json(self) -> dict[str, JSON]:
        return {"node": self.node, "error": self.error}


@dataclass(frozen=True, slots=True, kw_only=True)
class Cursor:
    """Where an instance is (see the module docstring)."""

    module: str
    queue: str
    retry: RetrySpec
    limits: Mapping[str, tuple[Limit, ...]] = field(default_factory=dict)
    """The limits of the instance's queues as they were at start, by queue."""
    seq: int = 0
    """The last frame's sequence number (frames are keyed ``node#seq``)."""
    frames: Mapping[str, Frame] = field(default_factory=dict)
    jobs: Mapping[str, PendingJob] = field(default_factory=dict)
    waits: Mapping[str, Wait] = field(default_factory=dict)
    stuck: Mapping[str, StuckJob] = field(default_factory=dict)
    done: tuple[str, ...] = ()
    error: LastError | None = None

    @classmethod
    def from_json(cls, stored: Stored) -> Cursor:
        error = stored["error"]
        return cls(
            module=stored["module"],
            queue=stored["queue"],
            retry=retry_of(stored["retry"]),
            seq=stored["seq"],
            frames={key: frame_of(frame) for key, frame in stored["frames"].items()},
            jobs={key: PendingJob.from_json(job) for key, job in stored["jobs"].items()},
            waits={key: Wait.from_json(wait) for key, wait in stored["waits"].items()},
            stuck={key: StuckJob.from_json(job) for key, job in stored["stuck"].items()},
            done=tuple(stored["done"]),
            error=LastError.from_json(error) if error is not None else None,
            limits={queue: limits_of(kept) for queue, kept in stored.get("limits", {}).items()},
        )

    def to_json(self) -> dict[str, JSON]:
        written: dict[str, JSON] = {
            "module": self.module,
            "queue": self.queue,
            "retry": retry_json(self.retry),
            "seq": self.seq,
            "frames": {key: frame.to_json() for key, frame in self.frames.items()},
            "jobs": {key: job.to_json() for key, job in self.jobs.items()},
            "waits": {key: wait.to_json() for key, wait in self.waits.items()},
            "stuck": {key: job.to_json() for key, job in self.stuck.items()},
            "done": list(self.done),
            "error": self.error.to_json() if self.error is not None else None,
        }
        if self.limits:
            written["limits"] = cast(
                JSON, {queue: limits_json(kept) for queue, kept in self.limits.items()}
            )
        return written


def cursor_of(instance: WorkflowInstanceRecord) -> Cursor | None:
    """The cursor the engine keeps on ``instance``; ``None`` if it holds none (an
    instance stored by some other writer)."""
    stored = instance.cursor
    return Cursor.from_json(stored) if isinstance(stored, dict) else None
