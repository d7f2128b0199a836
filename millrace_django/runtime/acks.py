"""Writing finished attempts: many transitions per round trip.

Finished executions queue up here; one thread writes everything queued in a single
``apply_many`` call, so under load acknowledgements group themselves (whatever finished
during one round trip goes in the next). While more jobs wait locally for a thread, a
finished attempt may linger briefly (:data:`LINGER`) until a full batch is ready: fewer,
larger writes for the same work. One submitted with nothing else queued is written at
once. Each transition is still fenced on its own. Buffered progress is written first,
while the claim still holds.

A call that raises (the database is away) is retried a few times, then the batch is
dropped: those jobs stay ``processing`` under this worker until their leases expire
and another claim runs them again, which at-least-once execution allows.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager

from millrace_django.contract import JobStorage, JobTransition
from millrace_django.errors import ConcurrencyConflict, StorageError
from millrace_django.runtime.execution import flush_progress, remerge
from millrace_django.runtime.inflight import Execution
from millrace_django.runtime.threads import JOIN_TIMEOUT

logger = logging.getLogger(__name__)

RETRY_DELAYS = (0.2, 0.4)
"""Seconds between the tries of a batch whose ``apply_many`` raised."""

LINGER = 0.01
"""Seconds an acknowledgement may wait for its batch to fill while more jobs are queued."""

type Result = bool | StorageError | None
"""Per transition: applied, fence lost, refused, or ``None`` when nothing was written."""

type Acknowledgement = tuple[Execution, JobTransition | None, Result]
"""An execution, the transition written for it (``None``: nothing to write) and how
that went."""

type Acknowledged = Callable[[list[Acknowledgement]], None]
"""Called with each written batch, in submission order."""


class Acknowledger:
    """Batches transitions into ``apply_many`` calls on its own thread."""

    def __init__(
        self,
        storage: JobStorage,
        *,
        on_acknowledged: Acknowledged,
        around_turn: Callable[[], AbstractContextManager[object]],
        name: str,
        batch: int = 1,
    ) -> None:
        self._storage = storage
        self._batch = batch
        """Pending acknowledgements that make a batch worth writing without lingering."""
        self._on_acknowledged = on_acknowledged
        self._around_turn = around_turn
        self._pending: list[tuple[Execution, JobTransition | None]] = []
        self._ready = threading.Condition(threading.Lock())
        self._closing = False
        self._stopped = False
        self._urgent = False
        """An acknowledgement is pending that must not linger."""
        self._lingering = False
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def submit(
        self, execution: Execution, transition: JobTransition | None, *, linger: bool = False
    ) -> None:
        """Queue a finished attempt; once the thread has stopped, write it right here.
        With ``linger`` (more jobs are about to finish), it may wait up to :data:`LINGER`
        for a full batch."""
        with self._ready:
            pending = self._pending
            pending.append((execution, transition))
            if not linger:
                self._urgent = True
            if not self._lingering or not linger or len(pending) >= self._batch:
                self._ready.notify()
            late = self._stopped
        if late:
            with self._around_turn():
                self.flush()

    def close(self) -> None:
        """Write everything still queued, then stop the thread."""
        with self._ready:
            self._closing = True
            self._ready.notify()
        if self._thread.is_alive():
            self._thread.join(JOIN_TIMEOUT + sum(RETRY_DELAYS))

    def flush(self) -> int:
        """Write what is queued now, in one ``apply_many`` call; returns how many
        executions were acknowledged."""
        with self._ready:
            batch, self._pending = self._pending, []
            self._urgent = False
        if not batch:
            return 0
        writes = [(execution, t) for execution, t in batch if t is not None]
        for execution, _ in writes:
            self._flush_progress(execution)
        results = self._apply([t for _, t in writes])
        outcomes = iter(results)
        done: list[Acknowledgement] = []
        for execution, transition in batch:
            result = next(outcomes) if transition is not None else None
            if transition is not None and result is not True:
                if isinstance(result, ConcurrencyConflict):
                    transition, result = self._remerge(execution, transition, result)
                self._report(execution, transition, result)
            done.append((execution, transition, result))
        self._on_acknowledged(done)
        return len(batch)

    def _run(self) -> None:
        while True:
            with self._ready:
                self._ready.wait_for(lambda: self._pending or self._closing)
                if not self._pending:
                    self._stopped = True
                    return
                if not self._ready_to_write():
                    self._lingering = True
                    self._ready.wait_for(self._ready_to_write, LINGER)
                    self._lingering = False
            try:
                with self._around_turn():
                    self.flush()
            except Exception:  # the hooks failed; keep the queue and try again shortly
                logger.exception("acknowledgement turn failed; retrying")
                time.sleep(RETRY_DELAYS[-1])

    def _ready_to_write(self) -> bool:
        """Whether the pending batch goes out now; lock held."""
        return self._urgent or self._closing or len(self._pending) >= self._batch

    def _remerge(
        self, execution: Execution, transition: JobTransition, conflict: ConcurrencyConflict
    ) -> tuple[JobTransition, Result]:
        """A workflow checkpoint lost its revision race: re-plan it on the stored
        instance and apply again, without running the job again."""
        try:
            return remerge(self._storage, execution.job, execution.context, transition, conflict)
        except Exception as error:  # the storage is away: the lease will lapse
            logger.exception("job %s: re-merging its checkpoint failed", execution.job.id)
            return transition, StorageError(f"re-merge failed: {error}")

    def _flush_progress(self, execution: Execution) -> None:
        try:
            flush_progress(self._storage, execution.job, execution.context)
        except Exception:
            logger.warning("cannot store the progress of job %s", execution.job.id, exc_info=True)

    def _apply(self, transitions: list[JobTransition]) -> list[bool | StorageError]:
        if not transitions:
            return []
        delays = iter(RETRY_DELAYS)
        while True:
            try:
                return self._storage.apply_many(transitions)
            except Exception as error:
                delay = next(delays, None)
                if delay is None:
                    logger.exception("dropping %d transitions after retries", len(transitions))
                    return [StorageError(f"apply_many failed: {error}")] * len(transitions)
                logger.warning("apply_many failed; retrying in %.1f s", delay, exc_info=True)
                time.sleep(delay)

    @staticmethod
    def _report(execution: Execution, transition: JobTransition | None, result: Result) -> None:
        if transition is None or result is True:
            return
        if result is False:
            logger.info(
                "job %s attempt %d: the claim moved on before its %s was written "
                "(fence lost; another worker owns it now)",
                execution.job.id,
                execution.job.attempt,
                transition.target.value,
            )
        elif isinstance(result, ConcurrencyConflict):
            logger.warning(
                "job %s: its workflow instance changed meanwhile; transition not written: %s",
                execution.job.id,
                result,
            )
        else:
            logger.error(
                "job %s: storage refused its %s transition: %s",
                execution.job.id,
                transition.target.value,
                result,
            )
