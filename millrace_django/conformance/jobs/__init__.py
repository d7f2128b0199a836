"""The job-storage facts, one module per heading of the facts page.

Sections load only when the whole suite is asked for, so one section can be imported
(and developed) on its own.
"""

from __future__ import annotations

from typing import Any


def _compose() -> type:
    from millrace_django.conformance.jobs.activation import ActivationFacts
    from millrace_django.conformance.jobs.additions import ApplyManyFacts, PurgeFacts, ResultFacts
    from millrace_django.conformance.jobs.batches import BatchFacts
    from millrace_django.conformance.jobs.cancellation import CancellationFacts
    from millrace_django.conformance.jobs.checkpoints import CheckpointFacts
    from millrace_django.conformance.jobs.claims import ClaimFacts
    from millrace_django.conformance.jobs.continuations import ContinuationFacts
    from millrace_django.conformance.jobs.duplicates import DuplicatePolicyFacts
    from millrace_django.conformance.jobs.expiry import ExpiryFacts
    from millrace_django.conformance.jobs.fence import FenceFacts
    from millrace_django.conformance.jobs.giving_back import GivingBackFacts
    from millrace_django.conformance.jobs.idempotency import IdempotencyFacts
    from millrace_django.conformance.jobs.job_checkpoints import JobCheckpointFacts
    from millrace_django.conformance.jobs.limits import LimitFacts
    from millrace_django.conformance.jobs.next_due import NextDueFacts
    from millrace_django.conformance.jobs.operating import (
        DisabledRecurringFacts,
        RecurringEditFacts,
        RunNowFacts,
    )
    from millrace_django.conformance.jobs.operations import (
        DeleteJobFacts,
        PausedQueueFacts,
        WorkerRegistryFacts,
    )
    from millrace_django.conformance.jobs.overlap import OverlapFacts
    from millrace_django.conformance.jobs.progress import ProgressFacts
    from millrace_django.conformance.jobs.recurring import RecurringFacts
    from millrace_django.conformance.jobs.renewal import RenewalFacts

    class JobStorageFacts(
        CheckpointFacts,
        ContinuationFacts,
        IdempotencyFacts,
        DuplicatePolicyFacts,
        BatchFacts,
        CancellationFacts,
        ClaimFacts,
        LimitFacts,
        RenewalFacts,
        FenceFacts,
        GivingBackFacts,
        ActivationFacts,
        RecurringFacts,
        OverlapFacts,
        DisabledRecurringFacts,
        RecurringEditFacts,
        RunNowFacts,
        ExpiryFacts,
        NextDueFacts,
        ResultFacts,
        ProgressFacts,
        JobCheckpointFacts,
        PurgeFacts,
        ApplyManyFacts,
        PausedQueueFacts,
        WorkerRegistryFacts,
        DeleteJobFacts,
    ):
        """Every fact a :class:`~millrace_django.contract.JobStorage` must hold."""

    return JobStorageFacts


def __getattr__(name: str) -> Any:
    if name == "JobStorageFacts":
        suite = _compose()
        globals()[name] = suite
        return suite
    raise AttributeError(name)


__all__ = ["JobStorageFacts"]
