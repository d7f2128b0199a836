"""One transaction per storage call: bounded, timed, and replayed whole on contention.

A storage call never leaves a transaction open behind it. Deadlocks, serialization
failures and inserts that lost a race for a unique key replay the *whole* transaction
(bounded, with jittered pauses), because only a fresh transaction sees the winner's row.
Every statement runs under the vendor's statement timeout.

A call that makes jobs ``enqueued`` says which queues (:meth:`Transactions.enqueued`);
just before its transaction (or savepoint) ends, those queues are announced once, so the
wake-up hint commits, or rolls back, with the jobs. A call that ends jobs (or deletes
finished ones) says so too (:meth:`Transactions.tally`): the changes to the maintained
counts are written once, just before the outermost call's transaction ends, so a batch
of transitions appends one row per group, not one per transition.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from django.db import DatabaseError, connections, transaction

from millrace_django.errors import StorageError

if TYPE_CHECKING:
    from millrace_django.storage.orm.vendors import Vendor

T = TypeVar("T")

DEFAULT_STATEMENT_TIMEOUT = timedelta(seconds=30)
DEFAULT_ATTEMPTS = 5
_FIRST_PAUSE_SECONDS = 0.005
_LONGEST_PAUSE_SECONDS = 0.2


class InsertConflict(Exception):
    """An insert hit a unique index that a concurrent writer took after our look-up;
    replaying the transaction lets the look-up see that writer's row."""


class Transactions:
    """Runs storage calls on one database alias."""

    def __init__(
        self,
        alias: str,
        vendor: Vendor,
        *,
        statement_timeout: timedelta = DEFAULT_STATEMENT_TIMEOUT,
        attempts: int = DEFAULT_ATTEMPTS,
        announce: Callable[[frozenset[str]], None] | None = None,
        record_tally: Callable[[Mapping[Any, int]], None] | None = None,
    ) -> None:
        if attempts < 1:
            raise ValueError("a transaction needs at least one attempt")
        self.alias = alias
        self.vendor = vendor
        self.statement_timeout = statement_timeout
        self.attempts = attempts
        self._announce = announce
        self._record_tally = record_tally
        self._local = threading.local()

    def enqueued(self, queues: Iterable[str]) -> None:
        """Note that jobs of ``queues`` became claimable in the current transaction
        (a no-op outside :meth:`write`)."""
        woken: set[str] | None = getattr(self._local, "woken", None)
        if woken is not None:
            woken.update(queues)

    def tally(self, changes: Mapping[Any, int]) -> None:
        """Note changes to maintained counts made in the current transaction (a no-op
        outside :meth:`write`). They are dropped with a savepoint that rolls back."""
        pending: Counter[Any] | None = getattr(self._local, "tallied", None)
        if pending is not None:
            pending.update(changes)

    def write(self, work: Callable[[], T], *, one_statement: bool = False) -> T:
        """Run ``work`` in its own transaction, replaying it on contention.

        Inside a caller's transaction (``transaction.atomic`` on the same alias) ``work``
        runs in a savepoint instead: only lost insert races are replayed there, since a
        deadlock belongs to the caller's whole transaction, and per-transaction settings
        (PostgreSQL's statement timeout) stay the caller's.

        ``one_statement`` says that ``work`` sends a single statement (one that also
        announces what it enqueued, if anything): where the vendor allows it, that
        statement then runs alone in autocommit, atomic by itself, without the round
        trips of ``BEGIN`` and ``COMMIT``; replayed the same way.
        """
        connection = connections[self.alias]
        nested = connection.in_atomic_block
        autocommit = one_statement and not nested and self.vendor.autocommit_statements
        attempt = 0
        while True:
            attempt += 1
            try:
                with self.vendor.statement_timeout(connection, self.statement_timeout):
                    if autocommit:
                        return self._run(work)
                    with transaction.atomic(using=self.alias):
                        if not nested:
                            self.vendor.begin(connection, self.statement_timeout)
                        return self._run(work)
            except InsertConflict as conflict:
                if attempt == self.attempts:
                    raise StorageError(
                        f"inserts kept conflicting with concurrent writers ({attempt} tries)"
                    ) from conflict
            except DatabaseError as error:
                if nested or attempt == self.attempts or not self.vendor.is_transient(error):
                    raise
            _pause(attempt)

    def _run(self, work: Callable[[], T]) -> T:
        """``work``, then the announcement of what it woke and (unless an enclosing call
        will) the record of what it tallied, in the same transaction."""
        outer: set[str] | None = getattr(self._local, "woken", None)
        outer_tally: Counter[Any] | None = getattr(self._local, "tallied", None)
        woken: set[str] = set()
        tallied: Counter[Any] = Counter()
        self._local.woken, self._local.tallied = woken, tallied
        try:
            result = work()
        finally:
            self._local.woken, self._local.tallied = outer, outer_tally
        if woken and self._announce is not None:
            self._announce(frozenset(woken))
        if tallied:
            if outer_tally is not None:
                outer_tally.update(tallied)
            elif self._record_tally is not None:
                self._record_tally(tallied)
        return result

    def read(self, work: Callable[[], T]) -> T:
        """Run read-only ``work``; in a transaction only where the vendor needs one to
        bound its statements (readers must not take SQLite's writer lock)."""
        connection = connections[self.alias]
        with self.vendor.statement_timeout(connection, self.statement_timeout):
            if not self.vendor.reads_in_transaction or connection.in_atomic_block:
                return work()
            with transaction.atomic(using=self.alias):
                self.vendor.begin(connection, self.statement_timeout)
                return work()


def _pause(attempt: int) -> None:
    """Full jitter: racers that collided once should not collide again in lockstep."""
    ceiling = min(_LONGEST_PAUSE_SECONDS, _FIRST_PAUSE_SECONDS * 2**attempt)
    time.sleep(random.uniform(0, ceiling))
