"""The job substrate over the ORM: each method is one storage call, one transaction."""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Sequence
from datetime import datetime, timedelta
from typing import Any, cast
from uuid import UUID

from django.db import IntegrityError, connections

from millrace_django.contract import (
    LOG_LINE_CAP,
    PRE_ACTIVE_JOB_STATES,
    TERMINAL_JOB_STATES,
    Capabilities,
    CheckpointReport,
    ClaimRequest,
    FireOutcome,
    JobLogLine,
    JobRecord,
    JobState,
    JobTransition,
    OverlapPolicy,
    ProgressReport,
    RecurringChange,
    RecurringRecord,
    WorkerHeartbeat,
    expired_reason,
)
from millrace_django.contract.chains import predecessors, unapplied_predecessor
from millrace_django.errors import StorageError
from millrace_django.models import JOB_STATES, JobLog, job_codes
from millrace_django.models import JobStateCode as Code
from millrace_django.storage.orm import queries, steps, tags, tallies
from millrace_django.storage.orm.context import Chain, Occurrence, OrmContext
from millrace_django.storage.orm.continuations import cancel_awaiting_closure
from millrace_django.storage.orm.inserts import insert_jobs
from millrace_django.storage.orm.rows import (
    arguments_json,
    job_record,
    recurring_fields,
    recurring_record,
)
from millrace_django.storage.orm.transactions import InsertConflict
from millrace_django.storage.orm.transitions import (
    apply_transition,
    is_plain_success,
)

_TERMINAL = job_codes(TERMINAL_JOB_STATES)
_WAITING_FOR_DUE_TIME = job_codes({JobState.SCHEDULED, JobState.FAILED})
_FINISHED_ROW = ("seq", "state", "queue", "target", "tenant_id", "finished_at")
"""What deleting a finished job reads of it: its row, and its place in the counts."""


class OrmJobs:
    """:class:`~millrace_django.contract.JobStorage` over the ORM."""

    def __init__(self, ctx: OrmContext) -> None:
        self._ctx = ctx

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities.NOTIFICATIONS

    def enqueue(self, jobs: Sequence[JobRecord]) -> list[UUID]:
        if not jobs:
            return []
        awaiting = any(job.state is JobState.AWAITING for job in jobs)
        hot_path = self._ctx.hot_path
        return self._ctx.tx.write(
            lambda: insert_jobs(self._ctx, jobs),
            one_statement=not awaiting and hot_path.insert_is_one_statement(self._ctx, jobs),
        )

    # -- claims and leases -------------------------------------------------------------

    def claim(self, request: ClaimRequest) -> list[JobRecord]:
        if request.max_count <= 0 or not request.queues:
            return []
        hot_path = self._ctx.hot_path
        return self._ctx.tx.write(
            lambda: hot_path.claim(self._ctx, request),
            one_statement=hot_path.claim_is_one_statement,
        )

    def renew_leases(self, worker_id: str, ids: Collection[UUID], lease: timedelta) -> set[UUID]:
        if not ids:
            return set()

        def renew() -> set[UUID]:
            held = list(
                self._ctx.jobs()
                .select_for_update()
                .filter(uuid__in=list(ids), state=Code.PROCESSING, worker_id=worker_id)
                .values_list("seq", "uuid", "cancel_requested")
            )
            if held:
                until = self._ctx.clock.now() + lease
                self._ctx.jobs().filter(seq__in=[seq for seq, _, _ in held]).update(
                    lease_until=until
                )
            return {uuid for _, uuid, cancel_requested in held if not cancel_requested}

        return self._ctx.tx.write(renew)

    # -- transitions -------------------------------------------------------------------

    def apply(self, transition: JobTransition) -> bool:
        return self._ctx.tx.write(lambda: apply_transition(self._ctx, transition))

    def apply_many(self, transitions: Sequence[JobTransition]) -> list[bool | StorageError]:
        """Plain successes are acknowledged together by the hot path, then workflow
        steps together (:mod:`.steps`); every other transition (and any job named
        twice) follows, each in its own savepoint."""
        outcomes: list[bool | StorageError | None] = [None] * len(transitions)
        named = Counter(t.job_id.int for t in transitions)  # an int hashes in C
        batched = [
            position
            for position, t in enumerate(transitions)
            if is_plain_success(t) and named[t.job_id.int] == 1
        ]
        if batched:
            plain = [transitions[p] for p in batched]
            hot_path = self._ctx.hot_path
            won = self._ctx.tx.write(
                lambda: hot_path.complete(self._ctx, plain),
                one_statement=hot_path.complete_is_one_statement(self._ctx, plain),
            )
            for position, ok in zip(batched, won, strict=True):
                outcomes[position] = ok
        rest = [position for position, outcome in enumerate(outcomes) if outcome is None]
        if rest:
            for position, outcome in self._ctx.tx.write(
                lambda: self._apply_rest(transitions, rest)
            ).items():
                outcomes[position] = outcome
        return [outcome for outcome in outcomes if outcome is not None]

    def _apply_rest(
        self, transitions: Sequence[JobTransition], positions: Sequence[int]
    ) -> dict[int, bool | StorageError]:
        """The workflow steps together where they can be, then the others one by one,
        in one transaction."""
        outcomes: dict[int, bool | StorageError] = {}
        chained = steps.chains(transitions, positions)
        if chained:
            batch = [Chain(tuple(transitions[p] for p in chain)) for chain in chained]
            try:
                results = self._ctx.tx.write(lambda: steps.apply_steps(self._ctx, batch))
            except StorageError:
                results = [None] * sum(map(len, chained))  # rolled back: one by one
            flat = [position for chain in chained for position in chain]
            for position, result in zip(flat, results, strict=True):
                if result is not None:
                    outcomes[position] = result
        left = [position for position in positions if position not in outcomes]
        after = predecessors(transitions)
        for position in left:
            before = after.get(position)
            if before is not None and outcomes.get(before) is not True:
                outcomes[position] = unapplied_predecessor(transitions[position])
            else:
                outcomes.update(self._apply_each(transitions, [position]))
        return outcomes

    def _apply_each(
        self, transitions: Sequence[JobTransition], positions: Sequence[int]
    ) -> dict[int, bool | StorageError]:
        """Each transition in a savepoint of one shared transaction: a refused one rolls
        back alone, and the batch pays one commit instead of one per transition."""
        outcomes: dict[int, bool | StorageError] = {}
        for position in positions:
            try:
                outcomes[position] = self.apply(transitions[position])
            except StorageError as error:
                outcomes[position] = error
        return outcomes

    def report_progress(self, report: ProgressReport) -> bool:
        def store() -> bool:
            row = (
                self._ctx.jobs()
                .select_for_update()
                .filter(
                    uuid=report.job_id,
                    state=Code.PROCESSING,
                    worker_id=report.worker_id,
                    attempt=report.attempt,
                )
                .only("seq")
                .first()
            )
            if row is None:
                return False
            if report.progress is not None:
                self._ctx.jobs().filter(seq=row.seq).update(progress=report.progress)
            if report.logs:
                self._append_logs(row.seq, report.logs)
            return True

        return self._ctx.tx.write(store)

    def save_checkpoint(self, report: CheckpointReport) -> bool:
        """One fenced UPDATE: the fence is its filter (a row it does not match is not
        touched, and the count says which)."""
        return self._ctx.tx.write(
            lambda: (
                self._ctx.jobs()
                .filter(
                    uuid=report.job_id,
                    state=Code.PROCESSING,
                    worker_id=report.worker_id,
                    attempt=report.attempt,
                )
                .update(checkpoint=report.data)
                == 1
            )
        )

    def _append_logs(self, job_seq: int, lines: Sequence[JobLogLine]) -> None:
        """Append, then drop what falls beyond the newest :data:`LOG_LINE_CAP` lines."""
        logs = self._ctx.logs()
        logs.bulk_create(
            [JobLog(job_id=job_seq, at=line.at, message=line.message) for line in lines]
        )
        beyond_cap = logs.filter(job_id=job_seq).order_by("-id").values_list("id", flat=True)
        first_dropped = beyond_cap[LOG_LINE_CAP : LOG_LINE_CAP + 1]
        if first_dropped:
            logs.filter(job_id=job_seq, id__lte=first_dropped[0]).delete()

    # -- operator moves ----------------------------------------------------------------

    def try_cancel(self, job_id: UUID) -> bool:
        def cancel() -> bool:
            row = (
                self._ctx.jobs()
                .select_for_update()
                .filter(uuid=job_id)
                .only("seq", "state", "queue", "target", "tenant_id")
                .first()
            )
            if row is None:
                return False
            state = JOB_STATES[row.state]
            if state is JobState.PROCESSING:
                self._ctx.jobs().filter(seq=row.seq).update(cancel_requested=True)
                return True
            if state not in PRE_ACTIVE_JOB_STATES:
                return False
            now = self._ctx.clock.now()
            self._ctx.jobs().filter(seq=row.seq).update(
                state=Code.CANCELLED, finished_at=now, key_scope=None
            )
            self._ctx.tx.tally(
                tallies.jobs_ended([(Code.CANCELLED, row.queue, row.target, row.tenant_id, now)])
            )
            cancel_awaiting_closure(self._ctx, job_id, now)
            return True

        return self._ctx.tx.write(cancel)

    def expire_due(self, now: datetime, limit: int) -> int:
        if limit <= 0:
            return 0

        def expire() -> int:
            rows = list(queries.expiring(self._ctx.jobs(), now, limit))
            if not rows:
                return 0
            for row in rows:
                row.state, row.finished_at, row.key_scope = Code.CANCELLED, now, None
                row.last_error = expired_reason(cast(datetime, row.expires_at))  # (selected)
            self._ctx.jobs().bulk_update(rows, ["state", "finished_at", "key_scope", "last_error"])
            self._ctx.tx.tally(
                tallies.jobs_ended(
                    (Code.CANCELLED, row.queue, row.target, row.tenant_id, now) for row in rows
                )
            )
            for row in rows:
                cancel_awaiting_closure(self._ctx, row.uuid, now)
            return len(rows)

        return self._ctx.tx.write(expire)

    def try_run_now(self, job_id: UUID) -> bool:
        def run_now() -> bool:
            row = (
                self._ctx.jobs()
                .select_for_update()
                .filter(uuid=job_id, state__in=_WAITING_FOR_DUE_TIME)
                .values_list("seq", "queue")
                .first()
            )
            if row is None:
                return False
            seq, queue = row
            self._ctx.jobs().filter(seq=seq).update(state=Code.ENQUEUED, due_at=None)
            self._ctx.tx.enqueued([queue])
            return True

        return self._ctx.tx.write(run_now)

    def get_job(self, job_id: UUID) -> JobRecord | None:
        def read() -> JobRecord | None:
            row = self._ctx.jobs().filter(uuid=job_id).first()
            return None if row is None else job_record(row, tags=tags.of_job(self._ctx, row.seq))

        return self._ctx.tx.read(read)

    def activate_due(self, now: datetime, limit: int) -> int:
        if limit <= 0:
            return 0

        hot_path = self._ctx.hot_path

        def activate() -> int:
            activated = hot_path.activate(self._ctx, now, limit)
            if activated is not None:
                return activated
            due = list(queries.due(self._ctx.jobs(), now, limit))
            if not due:
                return 0
            activated = (
                self._ctx.jobs()
                .filter(seq__in=[seq for seq, _ in due])
                .update(state=Code.ENQUEUED, due_at=None)
            )
            self._ctx.tx.enqueued(queue for _, queue in due)
            return activated

        return self._ctx.tx.write(activate, one_statement=hot_path.activate_is_one_statement)

    def purge_finished(self, before: datetime, limit: int) -> int:
        if limit <= 0:
            return 0

        def purge() -> int:
            finished = list(
                self._ctx.jobs()
                .select_for_update(skip_locked=True)
                .filter(state__in=_TERMINAL, finished_at__lt=before)
                .order_by("finished_at", "seq")
                .values_list(*_FINISHED_ROW)[:limit]
            )
            if not finished:
                return 0
            return self._delete_finished(finished)

        return self._ctx.tx.write(purge)

    def delete_job(self, job_id: UUID) -> bool:
        def delete() -> bool:
            finished = list(
                self._ctx.jobs()
                .select_for_update()
                .filter(uuid=job_id, state__in=_TERMINAL)
                .values_list(*_FINISHED_ROW)
            )
            return bool(finished) and self._delete_finished(finished) > 0

        return self._ctx.tx.write(delete)

    def _delete_finished(self, finished: Sequence[tuple[Any, ...]]) -> int:
        """Delete the finished rows read, and locked, as ``_FINISHED_ROW``, and take
        them off the maintained counts (a finished row never changes state, and the lock
        keeps a concurrent purge from deleting it too)."""
        seqs = [seq for seq, *_ in finished]
        jobs = self._ctx.jobs()
        deleted, per_model = jobs.filter(seq__in=seqs, state__in=_TERMINAL).delete()
        gone = tallies.jobs_ended(row[1:] for row in finished)
        self._ctx.tx.tally({key: -n for key, n in gone.items()})
        return per_model.get(jobs.model._meta.label, deleted)

    # -- paused queues and the worker registry -----------------------------------------

    def pause_queue(self, queue: str) -> None:
        def pause() -> None:
            if self._ctx.paused().filter(queue=queue).exists():
                return
            try:
                self._ctx.paused().create(queue=queue, paused_at=self._ctx.clock.now())
            except IntegrityError as error:  # a concurrent pause won: replayed, a no-op
                raise InsertConflict(str(error)) from error

        self._ctx.tx.write(pause)

    def resume_queue(self, queue: str) -> None:
        def resume() -> None:
            deleted, _ = self._ctx.paused().filter(queue=queue).delete()
            if deleted:
                self._ctx.tx.enqueued([queue])

        self._ctx.tx.write(resume)

    def paused_queues(self) -> set[str]:
        return self._ctx.tx.read(lambda: set(self._ctx.paused().values_list("queue", flat=True)))

    def record_worker_heartbeat(self, heartbeat: WorkerHeartbeat) -> None:
        fields = {
            "hostname": heartbeat.hostname,
            "pid": heartbeat.pid,
            "queues": sorted(heartbeat.queues),
            "concurrency": heartbeat.concurrency,
            "in_flight": heartbeat.in_flight,
            "started_at": heartbeat.started_at,
            "seen_at": heartbeat.seen_at,
        }

        def upsert() -> None:
            if self._ctx.workers().filter(worker_id=heartbeat.worker_id).update(**fields):
                return
            try:
                self._ctx.workers().create(worker_id=heartbeat.worker_id, **fields)
            except IntegrityError as error:  # created meanwhile: replayed as an update
                raise InsertConflict(str(error)) from error

        self._ctx.tx.write(upsert)

    def list_workers(self) -> list[WorkerHeartbeat]:
        rows = self._ctx.tx.read(
            lambda: list(self._ctx.workers().order_by("-seen_at", "worker_id"))
        )
        return [
            WorkerHeartbeat(
                worker_id=row.worker_id,
                hostname=row.hostname,
                pid=row.pid,
                queues=frozenset(row.queues),
                concurrency=row.concurrency,
                in_flight=row.in_flight,
                started_at=row.started_at,
                seen_at=row.seen_at,
            )
            for row in rows
        ]

    def forget_workers(self, seen_before: datetime) -> int:
        deleted, _ = self._ctx.tx.write(
            lambda: self._ctx.workers().filter(seen_at__lt=seen_before).delete()
        )
        return deleted

    # -- recurring ---------------------------------------------------------------------

    def upsert_recurring(self, record: RecurringRecord) -> None:
        def upsert() -> None:
            stored = self._ctx.recurring().select_for_update().filter(id=record.id).first()
            if stored is None:
                try:
                    self._ctx.recurring().create(id=record.id, **recurring_fields(record))
                except IntegrityError as error:
                    raise InsertConflict(str(error)) from error
                return
            fields = recurring_fields(record)
            if (stored.cron, stored.timezone) == (record.cron, record.timezone):
                del fields["next_fire_time"]
            for kept in (
                "last_fire_time",
                "fired_job_id",
                "last_skip_time",
                "enabled",
                "created_at",
            ):
                del fields[kept]
            self._ctx.recurring().filter(id=record.id).update(**fields)

        self._ctx.tx.write(upsert)

    def edit_recurring(self, recurring_id: str, change: RecurringChange) -> bool:
        def edit() -> bool:
            definition = self._ctx.recurring().filter(id=recurring_id)
            schedule = definition.select_for_update().values_list("cron", "timezone").first()
            if schedule is None:
                return False
            fields: dict[str, Any] = {
                "cron": change.cron,
                "timezone": change.timezone,
                "target": change.invocation.target,
                "arguments": arguments_json(change.invocation),
                "updated_at": self._ctx.clock.now(),
            }
            if schedule != (change.cron, change.timezone):
                fields["next_fire_time"] = change.next_fire_time
            definition.update(**fields)
            return True

        return self._ctx.tx.write(edit)

    def get_recurring(self, recurring_id: str) -> RecurringRecord | None:
        row = self._ctx.tx.read(lambda: self._ctx.recurring().filter(id=recurring_id).first())
        return recurring_record(row) if row is not None else None

    def remove_recurring(self, recurring_id: str) -> bool:
        deleted, _ = self._ctx.tx.write(
            lambda: self._ctx.recurring().filter(id=recurring_id).delete()
        )
        return deleted > 0

    def disable_recurring(self, recurring_id: str) -> bool:
        updated = self._ctx.tx.write(
            lambda: (
                self._ctx.recurring()
                .filter(id=recurring_id)
                .update(enabled=False, updated_at=self._ctx.clock.now())
            )
        )
        return updated > 0

    def enable_recurring(self, recurring_id: str, next_fire_time: datetime) -> bool:
        def enable() -> bool:
            definition = self._ctx.recurring().filter(id=recurring_id)
            return bool(
                definition.filter(enabled=False).update(
                    enabled=True, next_fire_time=next_fire_time, updated_at=self._ctx.clock.now()
                )
                or definition.exists()
            )

        return self._ctx.tx.write(enable)

    def get_due_recurring(self, now: datetime, limit: int) -> list[RecurringRecord]:
        if limit <= 0:
            return []

        def read() -> list[RecurringRecord]:
            due = self._ctx.hot_path.due_recurring(self._ctx, now, limit)
            if due is not None:
                return due
            rows = (
                self._ctx.recurring()
                .filter(~queries.held(self._ctx.jobs()), enabled=True, next_fire_time__lte=now)
                .order_by("next_fire_time", "id")[:limit]
            )
            return [recurring_record(row) for row in rows]

        return self._ctx.tx.read(read)

    def next_due_time(self, after: datetime) -> datetime | None:
        def soonest() -> datetime | None:
            found = self._ctx.hot_path.due_heads(self._ctx, after)
            if found is not None:
                return min((time for time in found if time is not None), default=None)
            heads = queries.due_heads(
                self._ctx.jobs(),
                self._ctx.recurring(),
                after,
                partial_indexes=connections[self._ctx.alias].features.supports_partial_indexes,
            )
            times = (time for head in heads for time in head if time is not None)
            return min(times, default=None)

        return self._ctx.tx.read(soonest)

    def try_fire_recurring(
        self, recurring_id: str, expected: datetime, next_fire_time: datetime, job: JobRecord
    ) -> FireOutcome:
        """The allowed fire is one compare-and-set ``UPDATE`` whose condition includes the
        overlap test, as before the policy existed (the hot path's ``fire``), alone in
        autocommit where it is one statement; a refused one tells a skip, a hold and a
        lost race apart by the statements after it, in a transaction that tries the fire
        first (again, if it was tried alone). A concurrent fire can only make those
        report ``LOST``: the compare-and-set serializes every fire of a definition."""
        hot_path = self._ctx.hot_path
        occurrence = Occurrence(recurring_id, expected, next_fire_time, job)

        def fire() -> bool:
            return hot_path.fire(self._ctx, occurrence)

        if hot_path.fire_is_one_statement(self._ctx, job) and self._ctx.tx.write(
            fire, one_statement=True
        ):
            return FireOutcome.FIRED

        def settle() -> FireOutcome:
            if fire():
                return FireOutcome.FIRED
            definition = self._ctx.recurring().filter(
                id=recurring_id, enabled=True, next_fire_time=expected
            )
            if definition.filter(overlap=OverlapPolicy.SKIP.value).update(
                next_fire_time=next_fire_time,
                last_skip_time=expected,
                updated_at=self._ctx.clock.now(),
            ):
                return FireOutcome.SKIPPED
            return FireOutcome.HELD if definition.exists() else FireOutcome.LOST

        return self._ctx.tx.write(settle)
