"""Joining a caller's transaction: what atomic jobs need of a provider.

An atomic job (``@job(atomic=True)``) runs inside a transaction on the storage's
database, and its success transition is applied in that same transaction, so the job's
writes and its ``succeeded`` commit together, fenced, or not at all. A provider offers
this by implementing :class:`JoinableTransactions`; one that cannot (the memory
provider: there is no database to share) does not, and atomic jobs are refused with it.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Protocol, runtime_checkable


@runtime_checkable
class JoinableTransactions(Protocol):
    """A provider whose calls can join a transaction the caller holds open."""

    def transaction(self) -> AbstractContextManager[object]:
        """A transaction on the storage's database, begun on entry and committed on a
        clean exit (rolled back when the block raises), on the calling thread. Every
        call the provider serves on that thread inside the block joins it, as does any
        write the caller makes on the same database connection: all of them commit
        together, or none does. Row locks a joined call takes are held until the
        block ends, so a caller should apply its fenced transition last."""
        ...
