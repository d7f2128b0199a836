"""The portable defaults every vendor starts from, and what a vendor reports of a
setting that would break the provider's guarantees."""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from datetime import timedelta
from typing import Any
from uuid import UUID

from django.db import DatabaseError
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Expression

from millrace_django.storage.orm.notify import LocalWakeups, Wakeups


@dataclass(frozen=True, slots=True)
class ConfigurationProblem:
    """A database setting that would break the provider's guarantees, and what to set
    instead (said in full: a pip-installed project has no docs folder to point at)."""

    message: str
    hint: str


class Vendor:
    """The portable defaults; subclasses override only what their database needs.
    Internal to the ORM provider (chosen by :func:`vendor_for`), not an extension point."""

    reads_in_transaction: bool = False
    """Whether reads need a transaction for their statements to be bounded."""

    autocommit_statements: bool = False
    """Whether a storage call that is one statement may run it alone in autocommit
    (bounded all the same), instead of inside a transaction of its own."""

    current_time_sql: str | None = None
    """A query of the server's clock now, as a UTC timestamp, for nodes to calibrate
    their clocks to it; ``None`` where the database runs on this machine's clock (or
    the vendor is unknown: nothing is calibrated)."""

    @classmethod
    def for_connection(cls, connection: BaseDatabaseWrapper) -> Vendor:
        """The strategy for ``connection`` (most need nothing from it)."""
        return cls()

    def configuration_problems(self, settings: Mapping[str, Any]) -> list[ConfigurationProblem]:
        """Why this alias's settings would break the provider's guarantees, if they do."""
        return []

    def statement_timeout(
        self, connection: BaseDatabaseWrapper, timeout: timedelta
    ) -> AbstractContextManager[object]:
        """Bound every statement run inside the block (one storage call), with whatever
        else the vendor sets for one call (PostgreSQL: generic plans for the hot path's
        prepared statements)."""
        return nullcontext()

    def begin(self, connection: BaseDatabaseWrapper, timeout: timedelta) -> None:
        """First statement of a storage-owned transaction."""

    def is_transient(self, error: DatabaseError) -> bool:
        """Whether ``error`` means "replay the whole transaction" (deadlock,
        serialization failure)."""
        return False

    def wakeups(self, alias: str, channel: str) -> Wakeups:
        """How storage calls on ``alias`` announce the jobs they enqueue: in-process,
        after commit, unless the database has a channel of its own."""
        return LocalWakeups(alias)

    def id_order(self, field: str) -> str | Expression:
        """What to order by (and compare with :meth:`id_bound`) so that uuid column
        ``field`` sorts in RFC 4122 byte order, as the contract's tie-breaks require:
        the column itself where the database stores uuids so that they sort that way."""
        return field

    def id_bound(self, value: UUID) -> Any:
        """``value`` as :meth:`id_order`'s expression sees it."""
        return value
