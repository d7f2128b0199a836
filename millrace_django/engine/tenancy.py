"""The ambient tenant, captured at enqueue and restored around the job's execution.

A context variable follows threads' own contexts and asyncio tasks, so concurrent
requests or coroutines never see each other's tenant.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

_current: ContextVar[str | None] = ContextVar("millrace_tenant", default=None)


def current_tenant() -> str | None:
    """The tenant jobs enqueued here belong to; ``None`` is the one shared untenanted scope."""
    return _current.get()


@contextmanager
def tenant(tenant_id: str | None) -> Iterator[str | None]:
    """Make ``tenant_id`` ambient inside the block; the previous tenant comes back after.

    ``tenant(None)`` explicitly leaves every tenant (the untenanted scope).
    """
    if tenant_id is not None and (not isinstance(tenant_id, str) or not tenant_id.strip()):
        raise ValueError(f"a tenant id must be a non-blank string or None; got {tenant_id!r}")
    token = _current.set(tenant_id)
    try:
        yield tenant_id
    finally:
        _current.reset(token)
