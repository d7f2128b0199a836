"""The job client: every way to create, schedule and manage jobs, validated before writing.

Each call checks everything it can (arguments, queue, due time, cron) before the one
storage call it makes, so a refused call leaves nothing behind. Jobs are minted here,
with ids and ``created_at`` from the injected clock and the ambient tenant.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from types import TracebackType
from typing import Any
from uuid import UUID

from millrace_django.clock import Clock
from millrace_django.contract import (
    TERMINAL_JOB_STATES,
    DuplicatePolicy,
    Invocation,
    JobRecord,
    JobState,
    JobStorage,
    OverlapPolicy,
    RecurringRecord,
    RetrySpec,
)
from millrace_django.engine.atomic import check_atomic
from millrace_django.engine.batches import (
    CALLBACK_KEYWORDS,
    COUNT_NAMES,
    FIRST_POLL,
    Callback,
    watcher_record,
    zero_counts,
)
from millrace_django.engine.cron import CronSchedule
from millrace_django.engine.engine_settings import EngineConfig
from millrace_django.engine.errors import (
    DuplicateIdempotencyKey,
    InvalidSchedule,
    JobNotFinished,
    UnknownQueue,
)
from millrace_django.engine.expiry import Expiry, deadline, expiry_of
from millrace_django.engine.invocation import capture
from millrace_django.engine.limits import job_limits, keyed
from millrace_django.engine.recurring import (
    change_of,
    first_fire_time,
    following_fire_time,
    occurrence,
)
from millrace_django.engine.registry import (
    ConfiguredJob,
    JobDefinition,
    JobLike,
    JobOptions,
    choice_of,
    unpack,
)
from millrace_django.engine.retry import validate_retry
from millrace_django.engine.status import JobStatus, job_id_of
from millrace_django.engine.tenancy import current_tenant
from millrace_django.ids import id_at, new_id
from millrace_django.observability.telemetry import publish

type _Resolved = tuple[JobDefinition[..., Any], Mapping[str, Any], Expiry | None]
"""A job's definition, the record fields its options give (and the defaults of the rest
but :data:`_PER_JOB`), and its options' deadline (:meth:`JobClient._resolve`)."""

_PER_JOB = (
    "id", "invocation", "state", "created_at", "due_at", "tenant_id", "parent_id", "expires_at",
)  # fmt: skip
"""The record fields :meth:`JobClient.build` gives each job itself."""


class JobClient:
    """Creates and manages jobs in one storage; the decorator's ``enqueue`` uses the
    process default (see :func:`~millrace_django.engine.set_default_client`)."""

    def __init__(self, storage: JobStorage, clock: Clock, config: EngineConfig) -> None:
        if config.default_queue not in set(config.queues):
            raise UnknownQueue(config.default_queue, frozenset(config.queues))
        validate_retry(config.default_retry)
        self.storage = storage
        self.clock = clock
        self.config = config
        self._last_resolved: tuple[JobLike, _Resolved] | None = None

    # -- creating jobs --------------------------------------------------------------------

    def enqueue(
        self,
        job: JobLike,
        /,
        *args: Any,
        idempotency_key: str | None = None,
        expires: Expiry | float | None = None,
        on_duplicate: DuplicatePolicy | str | None = None,
        **kwargs: Any,
    ) -> UUID:
        """Store a job to run as soon as a worker is free.

        Returns its id, or the id of the active job already holding
        ``idempotency_key`` in the ambient tenant (then nothing is stored). With
        ``on_duplicate="reject"`` such a holder raises
        :class:`~millrace_django.errors.IdempotencyKeyHeld` instead, and with
        ``"replace"`` a holder that has not started takes this call's arguments and due
        time (one that has raises). With ``expires`` (seconds or a ``timedelta`` from
        now, or an aware datetime), a job not started by then ends ``cancelled`` without
        running (see :mod:`~millrace_django.engine.expiry`).
        """
        if on_duplicate is not None:
            job = job.using(on_duplicate=on_duplicate)
        record = self.build(
            job, args, kwargs, state=JobState.ENQUEUED, key=idempotency_key, expires=expires
        )
        return self.store([record])[0]

    def schedule(
        self,
        job: JobLike,
        /,
        *args: Any,
        delay: timedelta | None = None,
        at: datetime | None = None,
        idempotency_key: str | None = None,
        expires: Expiry | float | None = None,
        on_duplicate: DuplicatePolicy | str | None = None,
        **kwargs: Any,
    ) -> UUID:
        """Store a job due after ``delay`` or at the aware datetime ``at`` (a past ``at``
        is allowed: the job is due at once). A delay given as ``expires`` counts from
        the due time; an instant must come after it. ``on_duplicate`` as for
        :meth:`enqueue`."""
        if on_duplicate is not None:
            job = job.using(on_duplicate=on_duplicate)
        due_at = self.due_at(delay=delay, at=at)
        record = self.build(
            job,
            args,
            kwargs,
            state=JobState.SCHEDULED,
            key=idempotency_key,
            due_at=due_at,
            expires=expires,
        )
        return self.store([record])[0]

    def continue_with(
        self,
        parent_id: UUID,
        job: JobLike,
        /,
        *args: Any,
        idempotency_key: str | None = None,
        expires: Expiry | float | None = None,
        **kwargs: Any,
    ) -> UUID:
        """Store a job that runs once ``parent_id`` succeeds; if the parent ends dead or
        cancelled, this one is cancelled. A missing parent raises
        :class:`~millrace_django.errors.ParentJobNotFound`. A delay given as ``expires``
        counts from now (when the parent ends is unknown). A continuation's duplicate
        policy (from ``using``) may be ``"return"`` or ``"reject"``: it cannot replace a
        holder, which does not wait for its parent."""
        if not isinstance(parent_id, UUID):
            raise TypeError(f"parent_id must be a job id (UUID); got {parent_id!r}")
        record = self.build(
            job,
            args,
            kwargs,
            state=JobState.AWAITING,
            key=idempotency_key,
            parent_id=parent_id,
            expires=expires,
        )
        if record.on_duplicate is DuplicatePolicy.REPLACE:
            raise ValueError(
                "a continuation cannot replace the holder of its key (the holder would not "
                "wait for the parent); use on_duplicate='reject' or the default"
            )
        return self.store([record])[0]

    def batch(
        self,
        on_complete: JobLike | None = None,
        *,
        on_complete_args: Sequence[Any] = (),
        on_complete_kwargs: Mapping[str, Any] | None = None,
    ) -> Batch:
        """A context manager collecting enqueues and schedules, stored all-or-nothing on
        a clean exit (nothing on an exception); ids are then in ``batch.ids``.

        ``on_complete`` names a job run once every job of the batch is terminal, called
        with ``on_complete_args``/``on_complete_kwargs`` plus the keywords ``batch_id``
        (``str(batch.id)``), ``succeeded``, ``dead`` and ``cancelled`` (the counts). The
        call is validated here, before anything is written (see
        :mod:`millrace_django.engine.batches`).
        """
        return Batch(
            self,
            on_complete=on_complete,
            on_complete_args=on_complete_args,
            on_complete_kwargs=on_complete_kwargs,
        )

    # -- recurring ------------------------------------------------------------------------

    def upsert_recurring(
        self,
        recurring_id: str,
        job: JobLike,
        /,
        *,
        cron: str,
        timezone: str = "UTC",
        queue: str | None = None,
        priority: int | None = None,
        retry: RetrySpec | None = None,
        args: Sequence[Any] = (),
        kwargs: Mapping[str, Any] | None = None,
        overlap: OverlapPolicy | str = OverlapPolicy.ALLOW,
    ) -> None:
        """Create or update a cron definition.

        The function's arguments go in ``args``/``kwargs`` so they never collide with
        these options. Re-upserting the same schedule keeps the pending fire time (safe
        to call at every deploy); a changed schedule fires next after now. ``overlap``
        says what an occurrence does while the job of the previous one is still active:
        ``"allow"`` (run anyway), ``"skip"`` (drop it) or ``"queue"`` (fire it once
        that job ends); see :class:`~millrace_django.contract.OverlapPolicy`.
        """
        if not isinstance(recurring_id, str) or not recurring_id.strip():
            raise ValueError(f"a recurring id must be a non-blank string; got {recurring_id!r}")
        definition, options = unpack(job)
        check_atomic(definition, self.storage, options.hard_timeout)
        if isinstance(job, ConfiguredJob) and job.options.idempotency_key is not None:
            raise ValueError(
                "recurring jobs take no idempotency key: the recurring id is their identity"
            )
        if isinstance(job, ConfiguredJob) and job.options.timeout is not None:
            raise ValueError("a recurring job's timeout comes from @job(timeout=...)")
        if isinstance(job, ConfiguredJob) and job.options.hard_timeout is not None:
            raise ValueError("a recurring job's hard timeout comes from @job(hard_timeout=...)")
        if isinstance(job, ConfiguredJob) and job.options.expires is not None:
            raise ValueError("a recurring job's deadline comes from @job(expires=...)")
        policy = choice_of(OverlapPolicy, "overlap", overlap)
        options = JobOptions(queue=queue, priority=priority, retry=retry).over(options)
        schedule = CronSchedule.parse(cron, timezone)
        now = self.clock.now()
        next_fire_time = first_fire_time(schedule, now)
        record = RecurringRecord(
            id=recurring_id,
            cron=schedule.expression,
            queue=self.queue(options.queue),
            invocation=capture(
                definition,
                tuple(args),
                dict(kwargs or {}),
                max_bytes=self.config.max_arguments_bytes,
            ),
            next_fire_time=next_fire_time,
            created_at=now,
            updated_at=now,
            timezone=schedule.timezone,
            retry=options.retry_policy(self.config.default_retry),
            priority=options.priority or 0,
            tenant_id=current_tenant(),
            overlap=policy,
        )
        self.storage.upsert_recurring(record)

    def remove_recurring(self, recurring_id: str) -> bool:
        """Delete a definition (jobs it fired are kept); whether it existed."""
        return self.storage.remove_recurring(recurring_id)

    def trigger_recurring(self, recurring_id: str) -> bool:
        """Enqueue one extra occurrence now, leaving the schedule alone; ``False`` if
        there is no such definition."""
        record = self.storage.get_recurring(recurring_id)
        if record is None:
            return False
        self.store([occurrence(record, self.clock, self.config.queue_limits)])
        return True

    def disable_recurring(self, recurring_id: str) -> bool:
        """Stop a definition from firing until it is enabled (it stays listed, and a
        redeploy's upsert keeps it disabled); whether it exists."""
        return self.storage.disable_recurring(recurring_id)

    def enable_recurring(self, recurring_id: str) -> bool:
        """Let a disabled definition fire again from its first occurrence after now:
        those it missed while disabled are dropped, not caught up. An enabled one is
        left alone. Whether it exists."""
        record = self.storage.get_recurring(recurring_id)
        if record is None:
            return False
        resume_at = following_fire_time(record, self.clock.now())
        return self.storage.enable_recurring(recurring_id, resume_at)

    def edit_recurring(
        self,
        recurring_id: str,
        *,
        cron: str | None = None,
        timezone: str | None = None,
        args: Sequence[Any] | None = None,
        kwargs: Mapping[str, Any] | None = None,
    ) -> bool:
        """Change a definition's cron, time zone or arguments (``args``/``kwargs``: given
        either, they replace the stored arguments whole), validated as
        :meth:`upsert_recurring` validates them before anything is written; a changed
        schedule fires next after now; every other field (queue, priority, overlap, ...)
        is left as stored. ``False`` if there is no such definition (an edit never
        creates one). The code's own ``upsert_recurring`` at the next deploy overwrites
        an edit."""
        record = self.storage.get_recurring(recurring_id)
        if record is None:
            return False
        arguments = None if args is None and kwargs is None else (args or (), kwargs or {})
        change = change_of(
            record,
            self.clock.now(),
            cron=cron,
            timezone=timezone,
            arguments=arguments,
            max_bytes=self.config.max_arguments_bytes,
        )
        return self.storage.edit_recurring(recurring_id, change)

    # -- reading and managing jobs --------------------------------------------------------

    def get(self, job_id: UUID | str) -> JobStatus | None:
        """The job's state, attempts, result and last error as stored now; ``None`` for
        an unknown (or purged) id. Any tenant's job is read: the id is the capability."""
        record = self.storage.get_job(job_id_of(job_id))
        return None if record is None else JobStatus.of(record)

    def cancel(self, job_id: UUID) -> bool:
        """Cancel a waiting job (and its awaiting continuations), or ask a running one to
        stop; ``False`` if it is unknown or already finished."""
        return self.storage.try_cancel(job_id)

    def run_now(self, job_id: UUID) -> bool:
        """Enqueue a job waiting for its due time now: a scheduled (delayed) job, or a
        failed one's pending retry (spending nothing). ``False`` for any other job."""
        return self.storage.try_run_now(job_id)

    def requeue(self, job_id: UUID) -> UUID | None:
        """Run a finished job again as a new job, linked by ``requeued_from``.

        The copy keeps queue, priority, arguments, retry, timeouts, idempotency key,
        tenant, tags and recurring id; it drops the continuation parent, the workflow links
        and the deadline (the operator asks for a run now).
        Only succeeded, dead or cancelled jobs qualify (``failed`` is refused: its own
        retry is still pending, and both would run). ``None`` for an unknown id.
        """
        original = self.storage.get_job(job_id)
        if original is None:
            return None
        if original.state not in TERMINAL_JOB_STATES:
            raise JobNotFinished(original.id, original.state.value)
        copy = JobRecord(
            id=new_id(self.clock),
            queue=original.queue,
            invocation=original.invocation,
            state=JobState.ENQUEUED,
            created_at=self.clock.now(),
            priority=original.priority,
            retry=original.retry,
            timeout=original.timeout,
            hard_timeout=original.hard_timeout,
            idempotency_key=original.idempotency_key,
            tenant_id=original.tenant_id,
            limits=original.limits,
            tags=original.tags,
            requeued_from=original.id,
            recurring_id=original.recurring_id,
        )
        return self.store([copy])[0]

    # -- building blocks (also used by Batch) ---------------------------------------------

    def store(self, records: Sequence[JobRecord]) -> list[UUID]:
        """Write new job records in one storage call, traced when OpenTelemetry is on
        (each record then carries its enqueue's trace context to the worker)."""
        return publish(self.storage, records)

    def build(
        self,
        job: JobLike,
        args: Sequence[Any],
        kwargs: Mapping[str, Any],
        *,
        state: JobState,
        key: str | None,
        due_at: datetime | None = None,
        parent_id: UUID | None = None,
        expires: Expiry | float | None = None,
    ) -> JobRecord:
        """A validated new job record (nothing is written). The deadline is ``expires``
        (else the job's options'), counted from ``due_at`` or now."""
        definition, fields, default_expiry = self._resolve(job, key)
        invocation = capture(definition, args, kwargs, max_bytes=self.config.max_arguments_bytes)
        now = self.clock.now()
        expiry = default_expiry if expires is None else expiry_of(expires)
        values = dict(fields)  # every field: JobRecord.from_complete takes it as it is
        values["limits"] = keyed(values["limits"], definition, invocation)
        values["id"] = id_at(now)
        values["invocation"] = invocation
        values["state"] = state
        values["created_at"] = now
        values["due_at"] = due_at
        values["tenant_id"] = current_tenant()
        values["parent_id"] = parent_id
        values["expires_at"] = deadline(expiry, due_at or now)
        return JobRecord.from_complete(values)

    def _resolve(self, job: JobLike, key: str | None) -> _Resolved:
        """``job``'s definition, and the fields its options give each of its jobs with
        ``key`` (the queue checked) with the defaults of every other field but
        :data:`_PER_JOB` (a template :meth:`build` copies). Without a key, the last job's
        are kept: a batch, or a loop of enqueues, mostly builds one job many times."""
        last = self._last_resolved
        if key is None and last is not None and last[0] is job:
            return last[1]
        definition, options = unpack(job)
        if key is not None:
            if options.idempotency_key is not None and options.idempotency_key != key:
                raise ValueError(
                    "idempotency_key was given both to using() and to the call; give it once"
                )
            options = JobOptions(idempotency_key=key).over(options)
        check_atomic(definition, self.storage, options.hard_timeout)
        fields = {
            "queue": self.queue(options.queue),
            "priority": options.priority or 0,
            "retry": options.retry_policy(self.config.default_retry),
            "timeout": options.timeout,
            "hard_timeout": options.hard_timeout,
            "idempotency_key": options.idempotency_key,
            "tags": options.tags or (),
            "on_duplicate": _policy_for_key(options),
        }
        queue = self.queue(options.queue)
        fields["limits"] = job_limits(definition, options, queue, self.config.queue_limits)
        fields.update(JobRecord.defaults_besides([*fields, *_PER_JOB]))
        resolved = (definition, fields, options.expires)
        if key is None:
            self._last_resolved = (job, resolved)
        return resolved

    def queue(self, name: str | None) -> str:
        """``name`` (or the default queue) if some node claims from it."""
        queue = name if name is not None else self.config.default_queue
        known = frozenset(self.config.queues)
        if queue not in known:
            raise UnknownQueue(queue, known)
        return queue

    def due_at(self, *, delay: timedelta | None, at: datetime | None) -> datetime:
        """The due instant for ``delay`` xor ``at``; naive datetimes and negative delays
        are refused (the engine does not guess a time zone)."""
        if (delay is None) == (at is None):
            raise InvalidSchedule("schedule needs exactly one of delay= or at=")
        if delay is not None:
            if not isinstance(delay, timedelta):
                raise InvalidSchedule(f"delay must be a timedelta; got {delay!r}")
            if delay < timedelta(0):
                raise InvalidSchedule(f"delay must not be negative; got {delay}")
            return self.clock.now() + delay
        if not isinstance(at, datetime):
            raise InvalidSchedule(f"at must be a datetime; got {at!r}")
        if at.tzinfo is None or at.utcoffset() is None:
            raise InvalidSchedule(
                f"at={at.isoformat()} is naive; pass a timezone-aware datetime "
                "(for example with tzinfo=datetime.UTC)"
            )
        return at.astimezone(UTC)


def _policy_for_key(options: JobOptions) -> DuplicatePolicy:
    """The duplicate policy of a job with ``options``: a policy needs a key to meet."""
    policy = options.on_duplicate or DuplicatePolicy.RETURN
    if policy is not DuplicatePolicy.RETURN and options.idempotency_key is None:
        raise ValueError(
            f"on_duplicate={policy.value!r} needs an idempotency_key: "
            "only a job with a key can meet a duplicate"
        )
    return policy


class Batch:
    """Enqueues and schedules stored together, or not at all.

    Continuations cannot be batched. Two items with the same (tenant, idempotency key)
    are refused as soon as the second is added, before anything is written.

    With a completion callback, a watcher job is stored with the items (same atom); it
    enqueues the callback once they are all terminal. Such a batch refuses items with an
    idempotency key (a deduplicated item would not be the job the watcher waits for),
    and an empty one enqueues the callback at once with zero counts.
    """

    def __init__(
        self,
        client: JobClient,
        *,
        on_complete: JobLike | None = None,
        on_complete_args: Sequence[Any] = (),
        on_complete_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        self._client = client
        self._jobs: list[JobRecord] = []
        self._scopes: set[tuple[str | None, str]] = set()
        self._open = True
        self.id: UUID = new_id(client.clock)
        """This batch's id, passed to the completion callback as ``batch_id`` (a str)."""
        self.ids: list[UUID] = []
        """The effective ids, positionally, once the batch is stored."""
        self.tenant = current_tenant()
        """The tenant the watcher and the callback run in (ambient at creation)."""
        self._callback: Callback | None = None
        if on_complete is not None:
            self._callback = self._bind_callback(
                on_complete, on_complete_args, on_complete_kwargs or {}
            )
        elif on_complete_args or on_complete_kwargs:
            raise ValueError("on_complete_args/on_complete_kwargs need on_complete=")

    def __enter__(self) -> Batch:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._open = False
        if exc_type is None:
            self._store()

    def _store(self) -> None:
        store, clock, callback = self._client.store, self._client.clock, self._callback
        if callback is None:
            if self._jobs:
                self.ids = store(self._jobs)
            return
        batch_id = str(self.id)
        if not self._jobs:
            store([callback.record(batch_id, zero_counts(), tenant=self.tenant, clock=clock)])
            return
        watcher = watcher_record(
            batch_id,
            [str(record.id) for record in self._jobs],
            zero_counts(),
            callback,
            delay=FIRST_POLL,
            tenant=self.tenant,
            clock=clock,
        )
        self.ids = store([*self._jobs, watcher])[: len(self._jobs)]

    def _bind_callback(
        self, job: JobLike, args: Sequence[Any], kwargs: Mapping[str, Any]
    ) -> Callback:
        """The callback call, checked as an enqueue would be (placeholder counts)."""
        definition, options = unpack(job)
        check_atomic(definition, self._client.storage, options.hard_timeout)
        if isinstance(args, str | bytes) or not isinstance(args, Sequence):
            raise TypeError(f"on_complete_args must be a sequence; got {args!r}")
        clashing = sorted(CALLBACK_KEYWORDS & set(kwargs))
        if clashing:
            raise ValueError(
                f"on_complete_kwargs may not set {', '.join(clashing)}: the batch passes them"
            )
        placeholders = dict.fromkeys(COUNT_NAMES, 0) | {"batch_id": str(self.id)}
        capture(
            definition,
            tuple(args),
            {**kwargs, **placeholders},
            max_bytes=self._client.config.max_arguments_bytes,
        )
        return Callback(
            # Stored as given (a JSON copy); the counts are added as keywords on completion.
            invocation=Invocation(
                target=definition.target,
                args=tuple(json.loads(json.dumps(list(args)))),
                kwargs=json.loads(json.dumps(dict(kwargs))),
            ),
            queue=self._client.queue(options.queue),
            priority=options.priority or 0,
            retry=options.retry_policy(self._client.config.default_retry),
            timeout=options.timeout,
            hard_timeout=options.hard_timeout,
            idempotency_key=options.idempotency_key,
        )

    def enqueue(
        self,
        job: JobLike,
        /,
        *args: Any,
        idempotency_key: str | None = None,
        expires: Expiry | float | None = None,
        **kwargs: Any,
    ) -> int:
        """Add a job to enqueue; returns its position in :attr:`ids`."""
        return self._add(
            self._client.build(
                job, args, kwargs, state=JobState.ENQUEUED, key=idempotency_key, expires=expires
            )
        )

    def schedule(
        self,
        job: JobLike,
        /,
        *args: Any,
        delay: timedelta | None = None,
        at: datetime | None = None,
        idempotency_key: str | None = None,
        expires: Expiry | float | None = None,
        **kwargs: Any,
    ) -> int:
        """Add a job to schedule; returns its position in :attr:`ids`."""
        due_at = self._client.due_at(delay=delay, at=at)
        return self._add(
            self._client.build(
                job,
                args,
                kwargs,
                state=JobState.SCHEDULED,
                key=idempotency_key,
                due_at=due_at,
                expires=expires,
            )
        )

    def _add(self, record: JobRecord) -> int:
        if not self._open:
            raise RuntimeError("this batch is closed; open a new one with client.batch()")
        if self._callback is not None and record.idempotency_key is not None:
            raise ValueError(
                f"a batch with on_complete takes no idempotency keys (got "
                f"{record.idempotency_key!r}): a deduplicated job is not one the batch "
                "could wait for"
            )
        if record.idempotency_key is not None:
            scope = (record.tenant_id, record.idempotency_key)
            if scope in self._scopes:
                raise DuplicateIdempotencyKey(
                    f"two jobs in one batch share the idempotency key "
                    f"{record.idempotency_key!r} (tenant {record.tenant_id!r}); "
                    "a batch may hold each key once"
                )
            self._scopes.add(scope)
        self._jobs.append(record)
        return len(self._jobs) - 1
