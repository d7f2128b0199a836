"""Job fields on log records: the runtime's own lines and whatever a job logs itself.

Every line the runtime writes about a job carries ``extra`` fields (see
:data:`FIELDS`), so a JSON formatter prints them as keys. While a job runs, it is the
*current job* (a context variable, which async jobs inherit too); :class:`JobLogFilter`
copies the same fields onto any record logged meanwhile, so a job's own
``logger.info(...)`` is tied to its job id without the job passing anything along.
"""

from __future__ import annotations

import logging
from contextvars import ContextVar

from millrace_django.contract import JobRecord, JobState, JobTransition

FIELDS = (
    "millrace_job_id",
    "millrace_job_name",
    "millrace_queue",
    "millrace_attempt",
    "millrace_worker_id",
    "millrace_tenant_id",
)
"""The attributes set on log records about a job (``None`` where unknown)."""

_current_job: ContextVar[JobRecord | None] = ContextVar("millrace_current_job", default=None)
"""Set around each attempt by :class:`~millrace_django.observability.telemetry.Observed`."""


def current_job() -> JobRecord | None:
    """The claimed job running in this context, if any."""
    return _current_job.get()


def job_fields(job: JobRecord) -> dict[str, object]:
    """The ``extra`` fields describing ``job`` (its claim's worker id included)."""
    return {
        "millrace_job_id": str(job.id),
        "millrace_job_name": job.invocation.target,
        "millrace_queue": job.queue,
        "millrace_attempt": job.attempt,
        "millrace_worker_id": job.worker_id,
        "millrace_tenant_id": job.tenant_id,
    }


class JobLogFilter(logging.Filter):
    """Adds the current job's fields to records that do not carry them yet.

    Attach it to a *handler* (a logger's filters only see records logged on that very
    logger, not those propagated from its children). It never drops a record.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        job = _current_job.get()
        if job is not None and not hasattr(record, "millrace_job_id"):
            record.__dict__.update(job_fields(job))
        return True


_ENDINGS: dict[JobState | None, tuple[int, str]] = {
    JobState.SUCCEEDED: (logging.DEBUG, "succeeded"),
    JobState.FAILED: (logging.WARNING, "failed; its retry is due at %s"),
    JobState.DEAD: (logging.ERROR, "failed for good; the job is dead: %s"),
    JobState.CANCELLED: (logging.INFO, "ended cancelled"),
    None: (logging.INFO, "ended without a write (another worker owns the job now)"),
}
_RELEASED = (logging.INFO, "was released; it runs again without spending a retry")


def log_attempt_end(
    logger: logging.Logger,
    job: JobRecord,
    transition: JobTransition | None,
    error: BaseException | None,
) -> None:
    """Log how an attempt ended, at its level: success DEBUG, a retry WARNING, a dead
    job ERROR, the rest INFO (nothing is formatted unless the level is on)."""
    target = transition.target if transition is not None else None
    level, ending = _ENDINGS.get(target, _RELEASED)
    if not logger.isEnabledFor(level):
        return
    detail: tuple[object, ...] = ()
    if target is JobState.FAILED and transition is not None:
        detail = (transition.due_at.isoformat() if transition.due_at else "now",)
    elif target is JobState.DEAD and transition is not None:
        lines = (transition.error or "").strip().splitlines()
        detail = (lines[-1] if lines else "no error recorded",)  # a traceback's last line
    logger.log(
        level,
        "job %s (%s) attempt %d " + ending,
        job.id,
        job.invocation.target,
        job.attempt,
        *detail,
        exc_info=error,
        extra=job_fields(job),
        stacklevel=2,
    )
