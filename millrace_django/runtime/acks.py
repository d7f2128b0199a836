"""Writing finished attempts: many transitions per round trip.

Finished executions queue up here; one thread writes everything queued in a single
``apply_many`` call, so under load acknowledgements group themselves (whatever finished
during one round trip goes in the next). While more jobs wait locally for a thread, a
finished attempt may linger briefly (:data:`LINGER`) until a full batch is ready: fewer,
larger writes for the same work. One submitted with nothing else queued is written at
once. Each transition is still fenced on its own. Buffered progress is written first,
while the claim still holds.

A call that raises (the database is away, or refuses the write) is retried in later
turns, with a growing pause, each turn on a connection the host checked afresh (a
server restart breaks the one in use). A transition is retried until its claim's lease
ends, then given up: the job stays ``processing`` until that lease expires and another
claim runs it again, which at-least-once execution allows. (The heartbeat renews a
finished job's lease for one more lease at most, while its completion waits to be
written, so a failing write cannot keep a claim alive forever.)
A give-back (``JobTransition.unstarted``) is never retried: the call may have committed
it, and this worker's next claim of the job reuses its ``(worker, attempt)`` fence.

An atomic job's success bypasses the batches: it is applied in the job's own
transaction, one savepoint and one commit per job (:meth:`Acknowledger.written` only
reports it).
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext

from millrace_django.clock import Clock
from millrace_django.contract import JobStorage, JobTransition
from millrace_django.errors import ConcurrencyConflict, StorageError
from millrace_django.runtime.execution import chain_checkpoints, flush_progress, remerge
from millrace_django.runtime.hooks import Scope, daemon_thread
from millrace_django.runtime.inflight import Execution
from millrace_django.runtime.job_pool import JOIN_TIMEOUT

logger = logging.getLogger(__name__)

FIRST_RETRY = 0.2
"""Seconds before the first retry of a batch whose ``apply_many`` raised..."""
LONGEST_RETRY = 5.0
"""...doubling (with jitter) after each failure, up to this."""

LINGER = 0.01
"""Seconds an acknowledgement may wait for its batch to fill while more jobs are queued."""

type Result = bool | StorageError | None
"""Per transition: applied, fence lost, refused, or ``None`` when nothing was written."""

type Acknowledgement = tuple[Execution, JobTransition | None, Result]
"""An execution, the transition written for it (``None``: nothing to write) and how
that went."""

type Acknowledged = Callable[[list[Acknowledgement]], None]
"""Called with each written batch, in submission order, on the acknowledger's thread;
and, from a job's thread, with an atomic job's success its own transaction wrote
(:meth:`Acknowledger.written`): it must be thread-safe."""


def _chained(
    batch: list[tuple[Execution, JobTransition | None]],
) -> list[tuple[Execution, JobTransition | None]]:
    """``batch`` with the checkpoints of sibling workflow steps chained
    (:func:`~millrace_django.runtime.execution.chain_checkpoints`)."""
    if sum(t is not None and t.checkpoint is not None for _, t in batch) < 2:
        return batch
    writes = [(execution.context, t) for execution, t in batch if t is not None]
    chained = iter(chain_checkpoints(writes))
    return [(execution, next(chained) if t is not None else None) for execution, t in batch]


class Acknowledger:
    """Batches transitions into ``apply_many`` calls on its own thread."""

    def __init__(
        self,
        storage: JobStorage,
        clock: Clock,
        *,
        on_acknowledged: Acknowledged,
        around_turn: Callable[[], AbstractContextManager[object]],
        name: str,
        batch: int = 1,
        around_thread: Scope = nullcontext,
    ) -> None:
        self._storage = storage
        self._clock = clock
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
        self._failures = 0
        """Consecutive ``apply_many`` calls that raised."""
        self._retry_at = 0.0
        """No write before this ``time.monotonic()`` (after a failure)."""
        self._thread = daemon_thread(self._run, name, around_thread)

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
            self._retry_before_lease_ends(execution, transition)
            late = self._stopped
        if late:
            with self._around_turn():
                self.flush(retry=False)

    def written(self, execution: Execution, transition: JobTransition | None, result: bool) -> None:
        """Report a finished attempt whose transition its own transaction already
        applied (an atomic job's success, see :mod:`~millrace_django.runtime.execution`):
        nothing is queued or written here, and no batch waits for it."""
        self._report(execution, transition, result)
        self._on_acknowledged([(execution, transition, result)])

    def close(self) -> None:
        """Try once more to write everything still queued (given up if that fails),
        then stop the thread."""
        with self._ready:
            self._closing = True
            self._ready.notify()
        if self._thread.is_alive():
            self._thread.join(JOIN_TIMEOUT)

    def flush(self, *, retry: bool = False) -> int:
        """Write what is queued now, in one ``apply_many`` call; returns how many
        executions were acknowledged. If the call raises and ``retry`` is set, the
        transitions whose lease has not ended stay queued for a later turn."""
        with self._ready:
            batch, self._pending = self._pending, []
            self._urgent = False
        if not batch:
            return 0
        batch = _chained(batch)
        writes = [(execution, t) for execution, t in batch if t is not None]
        for execution, _ in writes:
            self._flush_progress(execution)
        results = self._apply([t for _, t in writes])
        if isinstance(results, Exception):
            error = results
            if retry:
                batch = self._keep_for_retry(batch, error)
                failed = StorageError(
                    f"given up at the end of its lease; it will run again: {error}"
                )
            else:
                logger.warning("apply_many failed while stopping; not retried", exc_info=error)
                failed = StorageError(f"apply_many failed: {error}")
            results = [failed for _, t in batch if t is not None]
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
                # After a failure, pause (unless closing; a submission may shorten it).
                while not self._closing and (pause := self._retry_at - time.monotonic()) > 0:
                    self._ready.wait(pause)
                if not self._ready_to_write():
                    self._lingering = True
                    self._ready.wait_for(self._ready_to_write, LINGER)
                    self._lingering = False
                retry = not self._closing
            try:
                with self._around_turn():
                    self.flush(retry=retry)
            except Exception:  # the hooks failed; keep the queue and try again shortly
                logger.exception("acknowledgement turn failed; retrying")
                time.sleep(FIRST_RETRY)

    def _retry_before_lease_ends(
        self, execution: Execution, transition: JobTransition | None
    ) -> None:
        """Bring the pause after a failure forward to the end of ``execution``'s lease
        (lock held): the pause was sized by the leases of the transitions queued then,
        and one submitted meanwhile must still be tried, and given up, within its own."""
        now = time.monotonic()
        if self._retry_at <= now:
            return  # no pause pending (the usual case: nothing more to do per job)
        lease_until = execution.lease_until
        if transition is None or transition.unstarted or lease_until is None:
            return
        ends = now + max(0.0, (lease_until - self._clock.now()).total_seconds())
        if ends < self._retry_at:
            self._retry_at = ends
            self._ready.notify()

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

    def _apply(self, transitions: list[JobTransition]) -> list[bool | StorageError] | Exception:
        """The per-transition results, or what ``apply_many`` raised."""
        if not transitions:
            return []
        try:
            results = self._storage.apply_many(transitions)
        except Exception as error:
            self._failures += 1
            return error
        self._failures = 0
        return results

    def _keep_for_retry(
        self, batch: list[tuple[Execution, JobTransition | None]], error: Exception
    ) -> list[tuple[Execution, JobTransition | None]]:
        """Queue again the transitions of ``batch`` whose lease has not ended, to be
        tried after a pause that doubles with each failure in a row (jittered, and no
        later than the first of their leases' ends); return the rest, to be given up."""
        now = self._clock.now()
        again: list[tuple[Execution, JobTransition | None]] = []
        given_up: list[tuple[Execution, JobTransition | None]] = []
        for execution, transition in batch:
            lease_until = execution.lease_until
            live = (
                transition is not None
                and not transition.unstarted
                and lease_until is not None
                and now < lease_until
            )
            (again if live else given_up).append((execution, transition))
        ceiling = min(LONGEST_RETRY, FIRST_RETRY * 2 ** (self._failures - 1))
        pause = random.uniform(ceiling / 2, ceiling)
        if again:
            ends = min(execution.lease_until for execution, _ in again if execution.lease_until)
            pause = min(pause, max(0.0, (ends - now).total_seconds()))
        self._retry_at = time.monotonic() + pause
        with self._ready:
            self._pending[:0] = again
        logger.warning(
            "apply_many of %d transitions failed (%d in a row); retrying %d in %.3f s",
            sum(transition is not None for _, transition in batch),
            self._failures,
            len(again),
            pause,
            exc_info=error,
        )
        return given_up

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
                "job %s: its %s transition was not written: %s",
                execution.job.id,
                transition.target.value,
                result,
            )
