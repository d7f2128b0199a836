"""Where an atomic job (``@job(atomic=True)``) may be stored and run.

Its attempt runs in a transaction on the storage's database that also applies its
success, so the storage must be able to join a transaction
(:class:`~millrace_django.contract.transactions.JoinableTransactions`), and the function
must run on the worker's thread, not in a child process. Refused when a job is created
(enqueue, schedule, batch, recurring definition), and again by the worker, for a job
stored by another process: running it outside a transaction would silently break the
one promise it was declared for.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from millrace_django.contract.transactions import JoinableTransactions
from millrace_django.engine.errors import AtomicJobRefused
from millrace_django.engine.registry import JobDefinition


def atomic_refusal(
    definition: JobDefinition[..., Any], storage: object, hard_timeout: timedelta | None
) -> AtomicJobRefused | None:
    """Why a job of ``definition`` with ``hard_timeout`` cannot run atomically on
    ``storage``; ``None`` when it can (or is not atomic)."""
    if not definition.atomic:
        return None
    if hard_timeout is not None:
        return AtomicJobRefused(
            f"{definition.target} is atomic: it cannot take a hard timeout (the function "
            "would run in a child process, outside the job's transaction)"
        )
    if not isinstance(storage, JoinableTransactions):
        return AtomicJobRefused(
            f"{definition.target} is atomic, but the storage {type(storage).__name__} "
            "cannot join a transaction; use the ORM storage (MILLRACE['STORAGE'] = 'orm'), "
            "and in tests JobRunner.for_project(storage='orm')"
        )
    return None


def check_atomic(
    definition: JobDefinition[..., Any], storage: object, hard_timeout: timedelta | None
) -> None:
    """Raise :class:`~millrace_django.engine.errors.AtomicJobRefused` where
    :func:`atomic_refusal` finds a reason."""
    refusal = atomic_refusal(definition, storage, hard_timeout)
    if refusal is not None:
        raise refusal
