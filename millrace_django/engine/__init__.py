"""L1, the engine: job definitions, invocation capture, retries, cron, the client and
the outcome rules. Imports the contract, the standard library, croniter and asgiref (for
the async twins of the enqueue calls) only; the Django edge wires a storage and settings
into it."""

from millrace_django.engine.client import Batch, JobClient
from millrace_django.engine.cron import CronSchedule
from millrace_django.engine.default_client import default_client, set_default_client
from millrace_django.engine.engine_settings import EngineConfig, EngineSettings
from millrace_django.engine.errors import (
    ArgumentsTooLarge,
    AtomicJobRefused,
    DuplicateIdempotencyKey,
    HardTimeoutExceeded,
    InvalidCron,
    InvalidJobArguments,
    InvalidJobDefinition,
    InvalidRetry,
    InvalidSchedule,
    InvalidStoredArguments,
    JobCancelled,
    JobNotFinished,
    JobTimedOut,
    NotConfigured,
    UnknownQueue,
    UnknownTimezone,
    UnresolvableTarget,
    UnrunnableJob,
    UnserializableArgument,
)
from millrace_django.engine.executor import PreparedJob, prepare, run_handler, run_handler_async
from millrace_django.engine.invocation import capture, decode, resolve
from millrace_django.engine.job_context import CancelReason, JobContext, LogLine, Report
from millrace_django.engine.registry import (
    ConfiguredJob,
    JobDefinition,
    JobLike,
    JobOptions,
    job,
    lookup,
    registered_jobs,
)
from millrace_django.engine.retry import Retry, next_delay, validate_retry
from millrace_django.engine.status import JobStatus
from millrace_django.engine.tenancy import current_tenant, tenant

__all__ = [
    "ArgumentsTooLarge",
    "AtomicJobRefused",
    "Batch",
    "CancelReason",
    "ConfiguredJob",
    "CronSchedule",
    "DuplicateIdempotencyKey",
    "EngineConfig",
    "EngineSettings",
    "HardTimeoutExceeded",
    "InvalidCron",
    "InvalidJobArguments",
    "InvalidJobDefinition",
    "InvalidRetry",
    "InvalidSchedule",
    "InvalidStoredArguments",
    "JobCancelled",
    "JobClient",
    "JobContext",
    "JobDefinition",
    "JobLike",
    "JobNotFinished",
    "JobOptions",
    "JobStatus",
    "JobTimedOut",
    "LogLine",
    "NotConfigured",
    "PreparedJob",
    "Report",
    "Retry",
    "UnknownQueue",
    "UnknownTimezone",
    "UnresolvableTarget",
    "UnrunnableJob",
    "UnserializableArgument",
    "capture",
    "current_tenant",
    "decode",
    "default_client",
    "job",
    "lookup",
    "next_delay",
    "prepare",
    "registered_jobs",
    "resolve",
    "run_handler",
    "run_handler_async",
    "set_default_client",
    "tenant",
    "validate_retry",
]
