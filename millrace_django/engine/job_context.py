"""What a running job can see and say: its identity, its cancellation, progress, logs
and checkpoint.

The worker builds one per execution and fires ``cancelled`` on a cancel request, a
timeout, a lost lease or shutdown (with the reason, which decides the outcome). Progress
and log lines are buffered here; the worker flushes them with its own writes, so a
chatty job costs no extra round trips. A checkpoint is written at once instead (see
:meth:`JobContext.checkpoint`): a crash right after it must not lose it.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from uuid import UUID

from millrace_django.clock import Clock
from millrace_django.contract import (
    JSON,
    BookmarkRecord,
    CheckpointReport,
    JobRecord,
    JobStorage,
    WorkflowCheckpoint,
    WorkflowInstanceRecord,
)
from millrace_django.engine.errors import JobCancelled
from millrace_django.engine.jsonvalues import json_problem, storable_text

type Progress = float | dict[str, JSON]

type CheckpointSaver = Callable[[JSON], bool]
"""Stores a checkpoint for the running attempt; ``False``: the attempt lost the job."""

MAX_CHECKPOINT_BYTES = 1 << 20
"""The largest checkpoint, as JSON text in UTF-8 (the default arguments limit): a
checkpoint is a position to resume from, not the work's data."""


class CancelReason(StrEnum):
    """Why a running job's cancellation fired; decides what the worker writes."""

    REQUESTED = "requested"  # an operator or the client asked: the job ends cancelled
    TIMEOUT = "timeout"  # it ran too long: a failure, retried per its policy
    SHUTDOWN = "shutdown"  # the node is stopping: released, no retry budget spent
    LEASE_LOST = "lease_lost"  # another worker owns it now: write nothing
    SUPERSEDED = "superseded"  # a newer attempt runs here: write nothing


@dataclass(frozen=True, slots=True)
class LogLine:
    at: datetime
    message: str


@dataclass(frozen=True, slots=True)
class Report:
    """Buffered output not yet handed to storage."""

    progress: Progress | None
    logs: tuple[LogLine, ...]


_NOTHING_NEW = Report(progress=None, logs=())


@dataclass(frozen=True, slots=True, kw_only=True)
class SideEffects:
    """What a job's success carries into storage in the same atom as its transition:
    a workflow checkpoint, follow-on jobs and new bookmarks (see
    :meth:`JobContext.ride_on_success`)."""

    enqueue: Sequence[JobRecord] = ()
    checkpoint: WorkflowCheckpoint | None = None
    bookmarks: Sequence[BookmarkRecord] = ()
    remerge: Callable[[], SideEffects] | None = None
    """Recomputes these effects against the instance as stored now, for when the
    checkpoint lost its revision race (the job's function is not run again)."""
    replan: Callable[[WorkflowInstanceRecord], SideEffects] | None = None
    """Recomputes these effects against the given state of the instance: the one a
    sibling step's checkpoint, written in the same batch just before, leaves."""


class JobContext:
    """Passed to a job function that declares a ``context`` parameter."""

    def __init__(
        self,
        *,
        job_id: UUID,
        attempt: int,
        tenant: str | None,
        clock: Clock,
        storage: JobStorage | None = None,
        last_checkpoint: JSON = None,
        save_checkpoint: CheckpointSaver | None = None,
    ) -> None:
        self.job_id = job_id
        self.attempt = attempt
        self.tenant = tenant
        self.storage = storage
        """The storage the job was claimed from, when the runner says (the workflow
        dispatcher reads its instance there)."""
        self.instance: WorkflowInstanceRecord | None = None
        """For a workflow dispatcher job, its instance as the worker read it right after
        the claim (with the rest of the batch's), so the step need not read it; a later
        checkpoint's revision check catches it if it was overtaken."""
        self.side_effects: SideEffects | None = None
        self._cancelled: threading.Event | None = None  # made when first asked for
        self._clock = clock
        self._lock = threading.Lock()
        self._reason: CancelReason | None = None
        self._progress: Progress | None = None
        self._progress_pending = False
        self._logs: list[LogLine] = []
        self._last_checkpoint = last_checkpoint
        self._save_checkpoint = save_checkpoint
        self._no_checkpoints = "this context has no storage to save a checkpoint in"

    @classmethod
    def for_job(
        cls, job: JobRecord, clock: Clock, *, storage: JobStorage | None = None
    ) -> JobContext:
        """The context of a claimed ``job``; with ``storage``, its checkpoints are saved
        there under the claim's fence."""
        saver = None
        if storage is not None and job.worker_id is not None:
            saver = _fenced_saver(storage, job.id, job.worker_id, job.attempt)
        return cls(
            job_id=job.id,
            attempt=job.attempt,
            tenant=job.tenant_id,
            clock=clock,
            storage=storage,
            last_checkpoint=job.checkpoint,
            save_checkpoint=saver,
        )

    @property
    def clock(self) -> Clock:
        """The engine's clock."""
        return self._clock

    def ride_on_success(self, effects: SideEffects) -> None:
        """Have ``effects`` written with this job's success, in the same atom (replacing
        effects given earlier). Nothing is written if the job fails."""
        self.side_effects = effects

    # -- cancellation ---------------------------------------------------------------------

    @property
    def cancelled(self) -> threading.Event:
        """Set when the job should stop; long loops check it or call
        :meth:`raise_if_cancelled`. (Made on first use: most jobs never look.)"""
        with self._lock:
            event = self._cancelled
            if event is None:
                event = self._cancelled = threading.Event()
                if self._reason is not None:
                    event.set()
            return event

    def cancel(self, reason: CancelReason) -> None:
        """Fire the cancellation (worker side); the first reason given sticks."""
        with self._lock:
            if self._reason is None:
                self._reason = reason
            event = self._cancelled
        if event is not None:
            event.set()

    @property
    def cancel_reason(self) -> CancelReason | None:
        with self._lock:
            return self._reason

    def raise_if_cancelled(self) -> None:
        """Raise :class:`JobCancelled` once the cancellation has fired."""
        if self._reason is not None:
            raise JobCancelled(f"job {self.job_id} was cancelled ({self.cancel_reason})")

    # -- checkpoints ----------------------------------------------------------------------

    @property
    def last_checkpoint(self) -> JSON:
        """The checkpoint saved last for this job, by an earlier attempt (a failed one, or
        one cut short by a crash) or by this one; ``None`` if none was saved."""
        with self._lock:
            return self._last_checkpoint

    def checkpoint(self, data: JSON) -> bool:
        """Save ``data`` (JSON) as the point the next attempt of this job resumes from
        (it reads it as :attr:`last_checkpoint`), replacing the one saved before.

        Written at once, fenced by this attempt's lease, before this returns: a crash
        right after it keeps it. ``False`` means this attempt no longer owns the job
        (its lease was lost and another worker took it over): nothing was written, and
        the job's cancellation fires. A value JSON cannot store unchanged raises
        ``TypeError``, one over :data:`MAX_CHECKPOINT_BYTES` ``ValueError``.
        """
        problem = json_problem(data)
        if problem is not None:
            raise TypeError(f"a checkpoint must be JSON data: it {problem}")
        size = len(json.dumps(data, ensure_ascii=False).encode("utf-8"))
        if size > MAX_CHECKPOINT_BYTES:
            raise ValueError(
                f"a checkpoint takes {size} bytes as JSON, over the limit of "
                f"{MAX_CHECKPOINT_BYTES}; store the data elsewhere and checkpoint its key"
            )
        if self._save_checkpoint is None:
            raise RuntimeError(self._no_checkpoints)
        if not self._save_checkpoint(data):
            self.cancel(CancelReason.LEASE_LOST)
            return False
        with self._lock:
            self._last_checkpoint = data
        return True

    def refuse_checkpoints(self, reason: str) -> None:
        """Have :meth:`checkpoint` raise ``RuntimeError(reason)`` from now on (worker
        side: a job whose checkpoint could not be kept, or not written safely)."""
        self._save_checkpoint = None
        self._no_checkpoints = reason

    # -- progress and logs ----------------------------------------------------------------

    def report_progress(self, progress: float | Mapping[str, JSON]) -> None:
        """Record how far along the job is: a fraction in [0, 1] or a JSON object."""
        value: Progress
        if isinstance(progress, Mapping):
            value = dict(progress)
            problem = json_problem(value)
            if problem is not None:
                raise TypeError(f"progress must be JSON data: it {problem}")
        elif type(progress) in (int, float) and 0 <= progress <= 1:
            value = float(progress)
        else:
            raise ValueError(f"progress must be a fraction in [0, 1] or a dict; got {progress!r}")
        with self._lock:
            self._progress = value
            self._progress_pending = True

    def log(self, message: str) -> None:
        """Append a line to the job's log, stamped with the engine's clock."""
        line = LogLine(self._clock.now(), storable_text(str(message)))
        with self._lock:
            self._logs.append(line)

    @property
    def progress(self) -> Progress | None:
        """The latest reported progress."""
        with self._lock:
            return self._progress

    @property
    def logs(self) -> tuple[LogLine, ...]:
        """Log lines not yet taken by :meth:`take_report`."""
        with self._lock:
            return tuple(self._logs)

    def take_report(self) -> Report:
        """Hand over what was reported since the last call (the worker persists it)."""
        with self._lock:
            if not self._progress_pending and not self._logs:
                return _NOTHING_NEW
            report = Report(
                progress=self._progress if self._progress_pending else None,
                logs=tuple(self._logs),
            )
            self._progress_pending = False
            self._logs.clear()
            return report


def _fenced_saver(
    storage: JobStorage, job_id: UUID, worker_id: str, attempt: int
) -> CheckpointSaver:
    def save(data: JSON) -> bool:
        report = CheckpointReport(job_id=job_id, worker_id=worker_id, attempt=attempt, data=data)
        return storage.save_checkpoint(report)

    return save
