"""Error types shared by every layer.

Race losses are return values (``False``/``None``); these exceptions are for contract
violations and conflicts the caller must react to.
"""

from __future__ import annotations

from uuid import UUID


class MillraceError(Exception):
    """Base class of every error Millrace raises on purpose."""


class StorageError(MillraceError):
    """A storage operation refused its input (bad cursor, duplicate id, ...)."""


class InvalidCursor(StorageError):
    """A monitoring cursor could not be decoded; paging never silently restarts."""


class DuplicateJobId(StorageError):
    """A job id is already stored; the whole batch was rolled back."""

    def __init__(self, job_id: UUID) -> None:
        super().__init__(f"job {job_id} already exists; nothing was stored")
        self.job_id = job_id


class ConcurrencyConflict(StorageError):
    """A workflow instance was stale, missing or duplicated; everything was rolled back.

    Stale and missing are deliberately indistinguishable: both mean "re-read and retry".
    """


class ParentJobNotFound(StorageError):
    """A continuation named a parent that does not exist; everything was rolled back."""

    def __init__(self, parent_id: UUID) -> None:
        super().__init__(f"continuation parent {parent_id} does not exist; nothing was stored")
        self.parent_id = parent_id


class IdempotencyKeyHeld(StorageError):
    """An active job holds the idempotency key a new job asked for, and the new job's
    duplicate policy refuses it (``reject``, or ``replace`` with a holder that has
    already started); nothing was stored. ``holder_id`` is the holder's id."""

    def __init__(self, key: str, tenant_id: str | None, holder_id: UUID, why: str) -> None:
        super().__init__(
            f"idempotency key {key!r} (tenant {tenant_id!r}) is held by active job "
            f"{holder_id} ({why}); nothing was stored"
        )
        self.key = key
        self.tenant_id = tenant_id
        self.holder_id = holder_id
