"""The ORM schema behind :mod:`millrace_django.storage.orm` (and the admin's read views).

Jobs are ordered for claiming by ``priority`` then ``seq``, an insertion sequence that is
also the primary key; ``uuid`` is the job id the contract speaks of. States are stored as
small integers (:data:`JOB_STATE_CODES`). Indexes that serve the hot paths are partial on
the rows those paths touch, so they stay small however many finished jobs pile up.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from millrace_django.contract import (
    ACTIVE_JOB_STATES,
    PRE_ACTIVE_JOB_STATES,
    TERMINAL_JOB_STATES,
    AttemptOutcome,
    InstanceState,
    JobState,
    OverlapPolicy,
)
from millrace_django.dbschema import ActiveKeyConstraint, ExactCharField, PartialIndex


class JobStateCode(models.IntegerChoices):
    """How each :class:`~millrace_django.contract.JobState` is stored."""

    SCHEDULED = 0, JobState.SCHEDULED.value
    ENQUEUED = 1, JobState.ENQUEUED.value
    PROCESSING = 2, JobState.PROCESSING.value
    SUCCEEDED = 3, JobState.SUCCEEDED.value
    FAILED = 4, JobState.FAILED.value
    DEAD = 5, JobState.DEAD.value
    CANCELLED = 6, JobState.CANCELLED.value
    AWAITING = 7, JobState.AWAITING.value


class InstanceStateCode(models.IntegerChoices):
    """How each :class:`~millrace_django.contract.InstanceState` is stored."""

    RUNNING = 0, InstanceState.RUNNING.value
    SUSPENDED = 1, InstanceState.SUSPENDED.value
    COMPLETED = 2, InstanceState.COMPLETED.value
    FAILED = 3, InstanceState.FAILED.value
    COMPENSATED = 4, InstanceState.COMPENSATED.value
    CANCELLED = 5, InstanceState.CANCELLED.value


class AttemptOutcomeCode(models.IntegerChoices):
    """How each :class:`~millrace_django.contract.AttemptOutcome` is stored."""

    FAILED = 0, AttemptOutcome.FAILED.value
    INTERRUPTED = 1, AttemptOutcome.INTERRUPTED.value


JOB_STATE_CODES: dict[JobState, int] = {JobState(c.label): c.value for c in JobStateCode}
JOB_STATES: dict[int, JobState] = {code: state for state, code in JOB_STATE_CODES.items()}
INSTANCE_STATE_CODES: dict[InstanceState, int] = {
    InstanceState(c.label): c.value for c in InstanceStateCode
}
INSTANCE_STATES: dict[int, InstanceState] = {c: s for s, c in INSTANCE_STATE_CODES.items()}
ATTEMPT_OUTCOME_CODES: dict[AttemptOutcome, int] = {
    AttemptOutcome(c.label): c.value for c in AttemptOutcomeCode
}
ATTEMPT_OUTCOMES: dict[int, AttemptOutcome] = {c: o for o, c in ATTEMPT_OUTCOME_CODES.items()}


def job_codes(states: frozenset[JobState] | set[JobState]) -> list[int]:
    """Stored codes of ``states``, sorted so generated SQL (and migrations) are stable."""
    return sorted(JOB_STATE_CODES[state] for state in states)


_ACTIVE = job_codes(ACTIVE_JOB_STATES)
_TERMINAL = job_codes(TERMINAL_JOB_STATES)
_DUE = job_codes({JobState.SCHEDULED, JobState.FAILED})
_PRE_ACTIVE = job_codes(PRE_ACTIVE_JOB_STATES)
_LISTED_BY_STATE = job_codes(set(JobState) - {JobState.PROCESSING})
"""States the job list reads newest first through ``millrace_job_monitor_state``, one
state at a time (and merges). A claim (to processing) adds no entry to it: the list
finds processing jobs, few, through ``millrace_job_leased``. No index holds every job
in that order, which would take an entry at each of a job's writes."""


class Job(models.Model):
    """One job; see :class:`millrace_django.contract.JobRecord` for the fields' meaning."""

    seq = models.BigAutoField(primary_key=True)
    uuid = models.UUIDField(unique=True)
    queue = ExactCharField(max_length=200)
    state = models.PositiveSmallIntegerField(choices=JobStateCode.choices)
    priority = models.IntegerField(default=0)
    target = ExactCharField(max_length=500)
    arguments = models.JSONField(help_text="{'args': [...], 'kwargs': {...}}")
    retry = models.JSONField()
    timeout = models.DurationField(null=True, blank=True)
    hard_timeout = models.DurationField(
        null=True, blank=True, help_text="the attempt runs in a child process killed at this limit"
    )
    created_at = models.DateTimeField()
    due_at = models.DateTimeField(null=True, blank=True)
    worker_id = ExactCharField(max_length=200, null=True, blank=True)
    lease_until = models.DateTimeField(null=True, blank=True)
    attempt = models.IntegerField(default=0)
    failures = models.IntegerField(default=0)
    cancel_requested = models.BooleanField(default=False)
    idempotency_key = ExactCharField(max_length=400, null=True, blank=True)
    tenant_id = ExactCharField(max_length=200, null=True, blank=True)
    key_scope = ExactCharField(
        max_length=64,
        null=True,
        blank=True,
        help_text="Digest of (tenant, key) while active; see tracks_key_scope.",
    )
    parent_id = models.UUIDField(null=True, blank=True)
    requeued_from = models.UUIDField(null=True, blank=True)
    trace_parent = models.CharField(max_length=100, null=True, blank=True)
    recurring_id = ExactCharField(max_length=255, null=True, blank=True)
    last_error = models.TextField(null=True, blank=True)
    result = models.JSONField(null=True, blank=True)
    progress = models.JSONField(null=True, blank=True)
    checkpoint = models.JSONField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    workflow_instance_id = models.UUIDField(null=True, blank=True)
    activity_node_id = ExactCharField(max_length=200, null=True, blank=True)
    limited = models.BooleanField(
        default=False,
        db_default=False,
        help_text="Whether the job carries limits: claimed in the limited lane.",
    )
    limits = models.JSONField(
        null=True, blank=True, help_text="[{'scope', 'concurrency', 'rate': [count, period_us]}]"
    )
    limit_key = ExactCharField(
        max_length=720,
        null=True,
        blank=True,
        help_text="The narrowest scope of its limits: a claim skips jobs of full ones.",
    )
    expires_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(
        null=True, blank=True, help_text="When the latest attempt was claimed."
    )

    class Meta:
        db_table = "millrace_job"
        indexes = [
            # Two lanes of ready jobs in one index: jobs without limits (the plain
            # claim's, which reads no limit) and jobs with limits (the limited claim's).
            PartialIndex(
                name="millrace_job_ready",
                fields=["limited", "queue", "-priority", "seq"],
                condition=Q(state=JobStateCode.ENQUEUED),
                lead=["state"],
            ),
            PartialIndex(
                name="millrace_job_leased",
                fields=["lease_until"],
                condition=Q(state=JobStateCode.PROCESSING),
                lead=["state"],
            ),
            PartialIndex(
                name="millrace_job_due",
                fields=["due_at", "seq"],
                condition=Q(state__in=_DUE),
                lead=["state"],
            ),
            # Jobs with a deadline that have not started, for the scheduler's sweep
            # (expire_due): jobs without one take no entry.
            PartialIndex(
                name="millrace_job_expiring",
                fields=["expires_at", "seq"],
                condition=Q(state__in=_PRE_ACTIVE, expires_at__isnull=False),
                lead=["state"],
            ),
            PartialIndex(
                name="millrace_job_awaiting",
                fields=["parent_id"],
                condition=Q(state=JobStateCode.AWAITING),
                lead=["state"],
            ),
            PartialIndex(
                name="millrace_job_finished",
                fields=["finished_at", "seq"],
                condition=Q(state__in=_TERMINAL),
                lead=["state"],
            ),
            PartialIndex(
                name="millrace_job_recurring",
                fields=["recurring_id", "-created_at", "-uuid"],
                condition=Q(recurring_id__isnull=False),
                lead=[],
            ),
            PartialIndex(
                name="millrace_job_parent",
                fields=["parent_id", "created_at"],
                condition=Q(parent_id__isnull=False),
                lead=[],
            ),
            PartialIndex(
                name="millrace_job_monitor_state",
                fields=["state", "-created_at", "-uuid"],
                condition=Q(state__in=_LISTED_BY_STATE),
                lead=[],
            ),
            # The job list's narrow filters over finished jobs, read newest first within
            # one group (a queue and target, found in the tallies) or one tenant, and one
            # state. Only finished rows have entries (one, written when the job ends;
            # untenanted jobs none in the second): active jobs are found through the
            # indexes above.
            PartialIndex(
                name="millrace_job_finished_group",
                fields=["queue", "target", "state", "-created_at", "-uuid"],
                condition=Q(state__in=_TERMINAL),
                lead=[],
            ),
            PartialIndex(
                name="millrace_job_finished_tenant",
                fields=["tenant_id", "state", "-created_at", "-uuid"],
                condition=Q(state__in=_TERMINAL, tenant_id__isnull=False),
                lead=[],
            ),
        ]
        constraints = [ActiveKeyConstraint(name="millrace_job_active_key", active_states=_ACTIVE)]

    def __str__(self) -> str:
        return f"{self.target} [{JOB_STATES[self.state]}] {self.uuid}"


class JobAttempt(models.Model):
    """An execution that ended badly (failure or interruption); the newest few per job."""

    job = models.ForeignKey(
        Job, on_delete=models.DB_CASCADE, related_name="attempts", db_index=False
    )
    attempt = models.IntegerField()
    outcome = models.PositiveSmallIntegerField(choices=AttemptOutcomeCode.choices)
    recorded_at = models.DateTimeField()
    worker_id = ExactCharField(max_length=200, null=True, blank=True)
    error = models.TextField(null=True, blank=True)

    class Meta:
        db_table = "millrace_job_attempt"
        constraints = [
            models.UniqueConstraint(fields=["job", "attempt"], name="millrace_attempt_once")
        ]

    def __str__(self) -> str:
        return f"attempt {self.attempt} of job {self.job_id}"


class JobLog(models.Model):
    """A line a running job logged; the newest few per job, in the order they came."""

    job = models.ForeignKey(Job, on_delete=models.DB_CASCADE, related_name="logs", db_index=False)
    at = models.DateTimeField()
    message = models.TextField()

    class Meta:
        db_table = "millrace_job_log"
        indexes = [models.Index(name="millrace_log_job", fields=["job", "id"])]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.message[:60]}"


class JobTag(models.Model):
    """One tag of a job, a row of its own so that a tag's jobs are found through an index
    of tags alone (``(tag, job)``), on every database, whatever else the table holds.
    Untagged jobs have no rows here (their enqueue writes nothing more)."""

    job = models.ForeignKey(Job, on_delete=models.DB_CASCADE, related_name="tags", db_index=False)
    tag = ExactCharField(max_length=64)

    class Meta:
        db_table = "millrace_job_tag"
        constraints = [
            models.UniqueConstraint(fields=["tag", "job"], name="millrace_job_tag_once"),
        ]
        indexes = [models.Index(name="millrace_job_tag_job", fields=["job"])]

    def __str__(self) -> str:
        return f"{self.tag} on job {self.job_id}"


class TagTarget(models.Model):
    """A tag some job of a function was stored with: written once per pair by the first
    such enqueue, never deleted (a few rows per tag), so that a tag's catalog finds its
    functions without reading their jobs."""

    id = models.BigAutoField(primary_key=True)
    tag = ExactCharField(max_length=64)
    target = ExactCharField(max_length=500)

    class Meta:
        db_table = "millrace_tag_target"
        constraints = [
            models.UniqueConstraint(fields=["tag", "target"], name="millrace_tag_target_once"),
        ]

    def __str__(self) -> str:
        return f"{self.tag} on {self.target}"


class Recurring(models.Model):
    """A cron definition; ``next_fire_time`` is its compare-and-set fence."""

    id = ExactCharField(max_length=255, primary_key=True)
    cron = models.CharField(max_length=200)
    timezone = models.CharField(max_length=100, default="UTC")
    queue = ExactCharField(max_length=200)
    target = models.CharField(max_length=500)
    arguments = models.JSONField()
    retry = models.JSONField()
    priority = models.IntegerField(default=0)
    tenant_id = ExactCharField(max_length=200, null=True, blank=True)
    next_fire_time = models.DateTimeField()
    last_fire_time = models.DateTimeField(null=True, blank=True)
    overlap = models.CharField(
        max_length=10,
        choices=[(policy.value, policy.value) for policy in OverlapPolicy],
        default=OverlapPolicy.ALLOW.value,
    )
    fired_job_id = models.UUIDField(null=True, blank=True)
    last_skip_time = models.DateTimeField(null=True, blank=True)
    enabled = models.BooleanField(default=True, db_default=True)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        db_table = "millrace_recurring"
        verbose_name = "recurring job"
        verbose_name_plural = "recurring jobs"
        indexes = [models.Index(name="millrace_recurring_due", fields=["next_fire_time", "id"])]

    def __str__(self) -> str:
        return f"{self.id} ({self.cron})"


_UNFINISHED_INSTANCES = [InstanceStateCode.RUNNING.value, InstanceStateCode.SUSPENDED.value]
"""Counted per state (and tenant) through ``millrace_instance_unfinished`` alone."""


class WorkflowInstance(models.Model):
    """A workflow instance; ``revision`` is its checkpoint counter and fence."""

    id = models.UUIDField(primary_key=True)
    definition_id = ExactCharField(max_length=200)
    definition_version = models.IntegerField()
    state = models.PositiveSmallIntegerField(choices=InstanceStateCode.choices)
    data = models.JSONField(null=True, blank=True)
    cursor = models.JSONField(null=True, blank=True)
    revision = models.BigIntegerField(default=1)
    tenant_id = ExactCharField(max_length=200, null=True, blank=True)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        db_table = "millrace_workflow_instance"
        indexes = [
            models.Index(name="millrace_instance_monitor", fields=["-created_at", "-id"]),
            models.Index(name="millrace_instance_state", fields=["state", "-created_at", "-id"]),
            PartialIndex(
                name="millrace_instance_unfinished",
                fields=["state", "tenant_id"],
                condition=Q(state__in=_UNFINISHED_INSTANCES),
                lead=[],
            ),
            PartialIndex(
                name="millrace_instance_tenant",
                fields=["tenant_id", "-created_at", "-id"],
                condition=Q(tenant_id__isnull=False),
                lead=[],
            ),
            models.Index(
                name="millrace_instance_definition",
                fields=["definition_id", "-created_at", "-id"],
            ),
        ]

    def __str__(self) -> str:
        return f"{self.definition_id} v{self.definition_version} {self.id}"


class TallySubject(models.IntegerChoices):
    """What a :class:`Tally` row counts."""

    JOB = 0, "job"
    INSTANCE = 1, "workflow instance"


class Tally(models.Model):
    """A change to the number of finished jobs (or workflow instances) of one group,
    written in the transaction that made it: the count of a group is the sum of its
    rows. Each batch of transitions appends one row per group it ended; the scheduler
    folds a group's rows into one (the sum unchanged); the purge appends negative rows.
    No row is updated in place, so writers never wait on one another here."""

    id = models.BigAutoField(primary_key=True)
    subject = models.PositiveSmallIntegerField(choices=TallySubject.choices)
    state = models.PositiveSmallIntegerField(help_text="JobStateCode or InstanceStateCode")
    queue = ExactCharField(max_length=200, help_text="The job's queue; blank for instances.")
    target = ExactCharField(
        max_length=500, help_text="The job's target, or the instance's definition id."
    )
    tenant_id = ExactCharField(max_length=200, null=True, blank=True)
    n = models.BigIntegerField()

    class Meta:
        db_table = "millrace_tally"
        verbose_name_plural = "tallies"

    def __str__(self) -> str:
        return f"{self.get_subject_display()} {self.state} {self.queue} {self.target}: {self.n}"


class FinishedMinute(models.Model):
    """A change to the number of jobs that ended ``succeeded`` or ``dead`` within one
    UTC minute (the throughput chart's figures), kept like :class:`Tally`: appended by
    the transitions and the purge, folded by the scheduler."""

    id = models.BigAutoField(primary_key=True)
    minute = models.DateTimeField()
    state = models.PositiveSmallIntegerField(choices=JobStateCode.choices)
    n = models.BigIntegerField()

    class Meta:
        db_table = "millrace_finished_minute"
        indexes = [models.Index(name="millrace_finished_minute_at", fields=["minute"])]

    def __str__(self) -> str:
        return f"{self.minute:%Y-%m-%d %H:%M} {JOB_STATES[self.state]}: {self.n}"


class RunMinute(models.Model):
    """Successes of one job function (and tenant) that finished within one UTC minute,
    counted per run-time bucket (see :mod:`millrace_django.contract.catalog`): appended by
    the acknowledgements like :class:`FinishedMinute`, folded by the scheduler, and
    dropped once older than a day (the catalog reads the last hour)."""

    id = models.BigAutoField(primary_key=True)
    minute = models.DateTimeField()
    target = ExactCharField(max_length=500)
    tenant_id = ExactCharField(max_length=200, null=True, blank=True)
    bucket = models.PositiveSmallIntegerField()
    n = models.BigIntegerField()

    class Meta:
        db_table = "millrace_run_minute"
        indexes = [models.Index(name="millrace_run_minute_at", fields=["minute"])]

    def __str__(self) -> str:
        return f"{self.minute:%Y-%m-%d %H:%M} {self.target} bucket {self.bucket}: {self.n}"


class Bookmark(models.Model):
    """A durable wait for one signal, consumed at most once (oldest first)."""

    id = models.UUIDField(primary_key=True)
    instance_id = models.UUIDField()
    signal_name = ExactCharField(max_length=200)
    correlation_id = ExactCharField(max_length=400)
    payload_type = models.CharField(max_length=500, null=True, blank=True)
    created_at = models.DateTimeField()

    class Meta:
        db_table = "millrace_bookmark"
        indexes = [
            models.Index(
                name="millrace_bookmark_lookup",
                fields=["signal_name", "correlation_id", "created_at", "id"],
            )
        ]

    def __str__(self) -> str:
        return f"{self.signal_name}|{self.correlation_id}"


class Limit(models.Model):
    """One flow-control scope's row: locked by every claim that may start a job of the
    scope (so those claims serialize, and only those), and holding the scope's recent
    start times for its rate. The limits themselves travel on the jobs."""

    id = models.BigAutoField(primary_key=True)
    scope = ExactCharField(max_length=720)
    starts = models.JSONField(default=list, help_text="Start times (epoch microseconds).")
    updated_at = models.DateTimeField(help_text="Its creation, then its latest start.")

    class Meta:
        db_table = "millrace_limit"
        indexes = [models.Index(name="millrace_limit_idle", fields=["updated_at"])]
        # A unique constraint, not a primary key on the scope: MariaDB indexes its 720
        # characters (2,880 bytes) fine, but Django warns of any unique field longer
        # than 255 characters there (mysql.W003), in every project using Millrace.
        constraints = [models.UniqueConstraint(fields=["scope"], name="millrace_limit_scope")]

    def __str__(self) -> str:
        return str(self.scope)


class PausedQueue(models.Model):
    """A queue an operator paused: ``claim`` skips it while this row exists."""

    queue = ExactCharField(max_length=200, primary_key=True)
    paused_at = models.DateTimeField()

    class Meta:
        db_table = "millrace_paused_queue"

    def __str__(self) -> str:
        return str(self.queue)


class Worker(models.Model):
    """A worker's registry row, replaced on each heartbeat; for operators only (jobs
    are recovered by their leases, never by this row)."""

    worker_id = ExactCharField(max_length=200, primary_key=True)
    hostname = models.CharField(max_length=255)
    pid = models.BigIntegerField()
    queues = models.JSONField()
    concurrency = models.IntegerField()
    in_flight = models.IntegerField()
    started_at = models.DateTimeField()
    seen_at = models.DateTimeField()

    class Meta:
        db_table = "millrace_worker"
        indexes = [models.Index(name="millrace_worker_seen", fields=["seen_at"])]

    def __str__(self) -> str:
        return str(self.worker_id)
