"""The records a storage persists and the commands it applies.

Records are plain frozen data: the engine computes them, a provider stores them. Times are
timezone-aware UTC; JSON values are what :mod:`json` round-trips.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import MISSING, dataclass, field, fields
from datetime import datetime, timedelta
from enum import StrEnum
from functools import lru_cache
from types import MappingProxyType
from typing import Any, Self
from uuid import UUID

from millrace_django.contract.limits import Limit
from millrace_django.contract.states import InstanceState, JobState

type JSON = bool | int | float | str | list["JSON"] | dict[str, "JSON"] | None


@dataclass(frozen=True, slots=True, kw_only=True)
class Invocation:
    """What to run: a dotted target and JSON arguments, bound at enqueue."""

    target: str
    args: Sequence[JSON] = ()
    kwargs: Mapping[str, JSON] = field(default_factory=dict)

    @staticmethod
    @lru_cache(maxsize=256)
    def without_arguments(target: str) -> Invocation:
        """The call of ``target`` with no arguments, the commonest of all: one object per
        target, shared by its jobs (an invocation's mappings are never written to)."""
        return Invocation(target=target, kwargs=MappingProxyType({}))


class RetryKind(StrEnum):
    NONE = "none"
    FIXED = "fixed"
    EXPONENTIAL = "exponential"


@dataclass(frozen=True, slots=True, kw_only=True)
class RetrySpec:
    """A retry policy as stored on each job (resolved at enqueue, so config changes
    affect only later jobs). ``max_attempts`` counts every execution, the first included."""

    kind: RetryKind = RetryKind.NONE
    max_attempts: int = 1
    base_delay: timedelta = timedelta(0)
    max_delay: timedelta = timedelta(0)
    jitter: bool = False
    retry_on: tuple[str, ...] = ()
    """Exception classes (``"module.qualname"``) a failure must be an instance of to be
    retried; empty: any. A failure outside them is final."""
    give_up_on: tuple[str, ...] = ()
    """Exception classes whose failures are final whatever the budget (they win over
    ``retry_on``)."""


class _BuiltFromValues:
    """Frozen records built per job on the hot paths (every job enqueued, claimed and
    finished): :meth:`from_values` fills one in a step instead of the generated
    initializer's frozen assignment of each field in turn, a third to a quarter of the
    cost, and :meth:`from_complete` takes a dict of every field as it is. Such a record
    keeps its fields in ``__dict__`` (no slots)."""

    __slots__ = ()

    @classmethod
    def from_values(cls, values: Mapping[str, Any]) -> Self:
        """The record ``cls(**values)`` (fields by name, defaults for the rest)."""
        names, defaults = _shape(cls)
        record = object.__new__(cls)
        fields_ = record.__dict__
        if len(values) != len(names):  # (as many: every field given, or an error below)
            fields_.update(defaults)
        fields_.update(values)
        if fields_.keys() != names:
            raise TypeError(
                f"{cls.__name__} fields unknown: {sorted(fields_.keys() - names)}, "
                f"missing: {sorted(names - fields_.keys())}"
            )
        return record

    @classmethod
    def defaults_besides(cls, given: Collection[str]) -> dict[str, Any]:
        """The defaults of every field but ``given``, for :meth:`from_complete`; raises
        ``TypeError`` if one of ``given`` is no field, or a field has no default."""
        names, defaults = _shape(cls)
        unknown, missing = set(given) - names, names - set(given) - defaults.keys()
        if unknown or missing:
            raise TypeError(
                f"{cls.__name__} fields unknown: {sorted(unknown)}, missing: {sorted(missing)}"
            )
        return {name: value for name, value in defaults.items() if name not in given}

    @classmethod
    def from_complete(cls, values: dict[str, Any]) -> Self:
        """The record whose fields are ``values``, taken as they are: no check, and no
        copy (the record owns the dict from now on; the caller neither keeps nor changes
        it). For a caller that builds every record from the same names, checked once with
        :meth:`defaults_besides`. Half the cost of :meth:`from_values`."""
        record = object.__new__(cls)
        object.__setattr__(record, "__dict__", values)
        return record


def _shape(cls: type) -> tuple[frozenset[str], dict[str, Any]]:
    shape = _SHAPES.get(cls)
    if shape is None:
        shape = _SHAPES[cls] = _shape_of(cls)
    return shape


_SHAPES: dict[type, tuple[frozenset[str], dict[str, Any]]] = {}
"""Per record class: its field names, and the defaults of those that have one."""


def _shape_of(cls: type) -> tuple[frozenset[str], dict[str, Any]]:
    every = fields(cls)  # type: ignore[arg-type]
    if any(f.default_factory is not MISSING for f in every):
        raise TypeError(f"{cls.__name__}.from_values cannot fill a default_factory field")
    return frozenset(f.name for f in every), {
        f.name: f.default for f in every if f.default is not MISSING
    }


class DuplicatePolicy(StrEnum):
    """What an insert does when an active job already holds its idempotency key."""

    RETURN = "return"  # insert nothing; the position answers the holder's id
    REJECT = "reject"  # raise IdempotencyKeyHeld (with the holder's id); nothing stored
    REPLACE = "replace"  # a holder not yet started takes the new job's call and due time


@dataclass(frozen=True, kw_only=True)
class JobRecord(_BuiltFromValues):
    """One job row. ``attempt`` counts claims; ``failures`` counts recorded failures."""

    id: UUID
    queue: str
    invocation: Invocation
    state: JobState
    created_at: datetime
    priority: int = 0
    due_at: datetime | None = None
    worker_id: str | None = None
    lease_until: datetime | None = None
    attempt: int = 0
    failures: int = 0
    cancel_requested: bool = False
    retry: RetrySpec = RetrySpec()
    timeout: timedelta | None = None
    hard_timeout: timedelta | None = None
    idempotency_key: str | None = None
    tenant_id: str | None = None
    parent_id: UUID | None = None
    requeued_from: UUID | None = None
    trace_parent: str | None = None
    recurring_id: str | None = None
    last_error: str | None = None
    result: JSON = None
    progress: JSON = None
    checkpoint: JSON = None
    """The job's own checkpoint, saved by a running attempt (see
    :meth:`~millrace_django.contract.JobStorage.save_checkpoint`) for the next one to
    resume from; not a workflow's :class:`WorkflowCheckpoint`."""
    on_duplicate: DuplicatePolicy = DuplicatePolicy.RETURN
    """What inserting this job does when an active job holds its idempotency key (see
    :meth:`~millrace_django.contract.JobStorage.enqueue`); a request, never stored."""
    finished_at: datetime | None = None
    workflow_instance_id: UUID | None = None
    activity_node_id: str | None = None
    expires_at: datetime | None = None
    limits: tuple[Limit, ...] = ()
    """Flow-control limits on this job's starts (see :mod:`.limits`), resolved at enqueue."""
    started_at: datetime | None = None
    """When its latest attempt was claimed (the storage's clock): set by every claim,
    kept after the job ends; ``None`` before the first."""
    tags: tuple[str, ...] = ()
    """Labels to find the job by (see :mod:`.tags`), sorted; read back by ``get_job``
    (the records a claim returns may leave them out)."""
    """The job's deadline: no execution starts at or after it (see
    :meth:`~millrace_django.contract.JobStorage.expire_due`)."""


def expired_reason(expires_at: datetime) -> str:
    """The ``last_error`` of a job cancelled by its deadline ``expires_at`` (shown as its
    reason by the dashboard)."""
    return f"expired: not started by its deadline {expires_at.isoformat()}"


@dataclass(frozen=True, slots=True, kw_only=True)
class JobLogLine:
    """One line a running job logged, stamped by the engine's clock."""

    at: datetime
    message: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ProgressReport:
    """A running job's fenced report: its latest progress and new log lines."""

    job_id: UUID
    worker_id: str
    attempt: int
    progress: JSON = None
    """Replaces the stored progress unless ``None``."""
    logs: Sequence[JobLogLine] = ()


@dataclass(frozen=True, slots=True, kw_only=True)
class CheckpointReport:
    """A running job's fenced checkpoint: the JSON value its next attempt resumes from."""

    job_id: UUID
    worker_id: str
    attempt: int
    data: JSON


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkflowInstanceRecord:
    """A durable workflow instance; ``revision`` is its checkpoint counter and fence."""

    id: UUID
    definition_id: str
    definition_version: int
    state: InstanceState
    data: JSON
    created_at: datetime
    updated_at: datetime
    cursor: JSON = None
    revision: int = 1
    tenant_id: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkflowCheckpoint:
    """Replace ``instance`` iff the stored revision still equals ``expected_revision``."""

    instance: WorkflowInstanceRecord
    expected_revision: int


@dataclass(frozen=True, slots=True, kw_only=True)
class BookmarkRecord:
    """A durable wait for one signal; consumed at most once."""

    id: UUID
    instance_id: UUID
    signal_name: str
    correlation_id: str
    created_at: datetime
    payload_type: str | None = None


type ResumeJobs = Callable[
    [Sequence[BookmarkRecord | None], Mapping[UUID, WorkflowInstanceRecord]], Sequence[JobRecord]
]
"""Builds the jobs a batch of consumed bookmarks resumes, given them (``None`` where a
signal found none) and their instances as stored, by id."""


@dataclass(frozen=True, slots=True, kw_only=True)
class NewInstance:
    """An instance to start: stored with its first jobs and its first waits."""

    instance: WorkflowInstanceRecord
    enqueue: tuple[JobRecord, ...] = ()
    bookmarks: tuple[BookmarkRecord, ...] = ()


@dataclass(frozen=True, kw_only=True)
class JobTransition(_BuiltFromValues):
    """A worker's fenced command: move one job and commit every side effect with it.

    The fence is ``(state = processing, worker_id = expected_worker_id,
    attempt = expected_attempt)``. ``failures`` is the new value, computed by the engine.
    """

    job_id: UUID
    expected_worker_id: str
    expected_attempt: int
    target: JobState
    failures: int
    due_at: datetime | None = None
    error: str | None = None
    finished_at: datetime | None = None
    result: JSON = None
    enqueue: Sequence[JobRecord] = ()
    checkpoint: WorkflowCheckpoint | None = None
    bookmarks: Sequence[BookmarkRecord] = ()
    activate_continuations: bool = False
    cancel_continuations: bool = False
    unstarted: bool = False
    """Only with target ``enqueued``: a release of an attempt whose execution never
    started (prefetched, or held back), which undoes its claim. The stored ``attempt``
    becomes ``expected_attempt - 1``, so the next claim gets the same number again, and
    no attempt-history row is written: it is no interruption, and a job given back any
    number of times never nears its poison-pill verdict. Everything else is exactly a
    release's (fence, ``failures`` as given, worker, lease and ``due_at`` cleared,
    ``cancel_requested`` kept). With any other target the transition is a contract
    violation (:class:`~millrace_django.errors.StorageError`, nothing changes).

    The next claim by the same worker reuses the given-back ``(worker, attempt)``, so a
    worker sends a given-back transition once and never retries it."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ClaimRequest:
    """Lease up to ``max_count`` claimable jobs from ``queues`` to ``worker_id``."""

    worker_id: str
    queues: frozenset[str]
    max_count: int
    lease: timedelta


class OverlapPolicy(StrEnum):
    """What a recurring definition does when an occurrence comes due while the job of its
    previous fire is still active (any state but a terminal one)."""

    ALLOW = "allow"  # fire anyway: occurrences may run side by side
    SKIP = "skip"  # drop this occurrence (recorded in ``last_skip_time``)
    QUEUE = "queue"  # hold it until the previous job ends, then fire it


class FireOutcome(StrEnum):
    """What :meth:`~millrace_django.contract.JobStorage.try_fire_recurring` did."""

    FIRED = "fired"  # the job was inserted and the schedule advanced
    SKIPPED = "skipped"  # overlap ``skip``: the schedule advanced, nothing inserted
    HELD = "held"  # overlap ``queue``: nothing changed; fired once the previous job ends
    LOST = "lost"  # unknown id or stale ``expected`` (fired elsewhere): nothing changed


@dataclass(frozen=True, slots=True, kw_only=True)
class RecurringRecord:
    """A cron definition; ``next_fire_time`` doubles as its compare-and-set fence."""

    id: str
    cron: str
    queue: str
    invocation: Invocation
    next_fire_time: datetime
    created_at: datetime
    updated_at: datetime
    timezone: str = "UTC"
    retry: RetrySpec = field(default_factory=RetrySpec)
    priority: int = 0
    tenant_id: str | None = None
    last_fire_time: datetime | None = None
    overlap: OverlapPolicy = OverlapPolicy.ALLOW
    fired_job_id: UUID | None = None
    """The job the last fire inserted (what the overlap policy looks at); kept by the
    storage, like ``last_fire_time``."""
    last_skip_time: datetime | None = None
    """The occurrence last dropped by overlap ``skip``; kept by the storage."""
    enabled: bool = True
    """``False`` while an operator has it disabled: it never fires. Stored by the first
    upsert, then changed only by ``disable_recurring``/``enable_recurring`` (a redeploy's
    upsert keeps it)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RecurringChange:
    """An operator's edit of a stored definition: its schedule and what it runs.
    ``next_fire_time`` is the new schedule's first occurrence after now (stored only if
    the schedule changed)."""

    cron: str
    timezone: str
    invocation: Invocation
    next_fire_time: datetime


@dataclass(frozen=True, slots=True, kw_only=True)
class WorkerHeartbeat:
    """One worker's row in the registry, written on each of its heartbeats.

    The registry is for operators only: a worker's jobs are recovered by their leases,
    never by its row (a row may outlive its worker, or a worker its row).
    """

    worker_id: str
    hostname: str
    pid: int
    queues: frozenset[str]
    concurrency: int
    in_flight: int
    """Jobs the worker held when it sent this heartbeat."""
    started_at: datetime
    seen_at: datetime
    """The worker's clock at this heartbeat."""
