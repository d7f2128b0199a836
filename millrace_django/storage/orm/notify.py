"""Wake-up hints: "jobs of these queues became claimable", delivered after commit.

A storage call collects the queues whose jobs it made ``enqueued`` (see
:meth:`~millrace_django.storage.orm.transactions.Transactions.enqueued`) and, before its
transaction ends, hands them to its :class:`Wakeups` once:

- :class:`PostgresWakeups` issues ``pg_notify(channel, queue)`` in that transaction, one
  per distinct queue, so PostgreSQL delivers them on commit only (a rollback, including
  the caller's, discards them) to every listening session, in any process. A listener
  holds its own connection (:class:`PostgresSubscription`).
- :class:`LocalWakeups` (SQLite, MariaDB, SQL Server, which have no such channel)
  publishes in-process, from ``transaction.on_commit``: a worker in the same process
  wakes at once; workers elsewhere find the jobs at their next poll.

Hints are only hints: they may be dropped, duplicated or spurious, and nothing here ever
raises into a worker's loop. The worker's poll ceiling is what liveness rests on.
"""

from __future__ import annotations

import logging
import os
import selectors
import threading
import time
from collections.abc import Collection, Mapping
from functools import partial
from typing import Any, Protocol

from django.db import connections, transaction

from millrace_django.contract import WakeupSubscription
from millrace_django.storage.memory.notifier import MemoryNotifier

logger = logging.getLogger(__name__)

DEFAULT_CHANNEL = "millrace_jobs"
"""The PostgreSQL channel; ``NOTIFY`` is scoped to one database already."""

FIRST_RETRY_SECONDS = 0.25
"""A lost listener connection is retried after this long, doubling each failure..."""
LONGEST_RETRY_SECONDS = 10.0
"""...up to this (a worker still polls meanwhile)."""
CONNECT_TIMEOUT_SECONDS = 5
"""Bound on one connection attempt, unless the alias's OPTIONS sets ``connect_timeout``."""

# What Django adds to the connection parameters for its own cursors; a listener needs
# none of it (and psycopg.connect would pass the unknown ones to libpq).
_DJANGO_ONLY_PARAMETERS = ("cursor_factory", "context", "prepare_threshold")


class Wakeups(Protocol):
    """How one storage announces and listens for wake-up hints."""

    def announce(self, queues: frozenset[str]) -> None:
        """Called inside the storage call's transaction, with the queues it woke."""
        ...

    def listen(self, queues: Collection[str]) -> WakeupSubscription: ...


# -- in-process ------------------------------------------------------------------------

_hubs: dict[str, MemoryNotifier] = {}
_hubs_lock = threading.Lock()


def _hub(alias: str) -> MemoryNotifier:
    """The process-wide hint hub of ``alias`` (shared by every storage on it)."""
    with _hubs_lock:
        return _hubs.setdefault(alias, MemoryNotifier())


class LocalWakeups:
    """In-process hints, published after the transaction commits (never on rollback)."""

    def __init__(self, alias: str) -> None:
        self.alias = alias

    def announce(self, queues: frozenset[str]) -> None:
        transaction.on_commit(partial(_hub(self.alias).publish, queues), using=self.alias)

    def listen(self, queues: Collection[str]) -> WakeupSubscription:
        return _hub(self.alias).listen(queues)


# -- PostgreSQL --------------------------------------------------------------------------

_NOTIFY_SQL = "SELECT pg_notify(%s, queue) FROM unnest(%s::text[]) AS queue"


class PostgresWakeups:
    """``pg_notify`` inside the transaction; ``LISTEN`` on a dedicated connection."""

    def __init__(self, alias: str, channel: str = DEFAULT_CHANNEL) -> None:
        self.alias = alias
        self.channel = channel

    def announce(self, queues: frozenset[str]) -> None:
        with connections[self.alias].cursor() as cursor:
            cursor.execute(_NOTIFY_SQL, [self.channel, sorted(queues)])

    def listen(self, queues: Collection[str]) -> PostgresSubscription:
        return PostgresSubscription(
            listener_parameters(self.alias), self.channel, frozenset(queues)
        )


def listener_parameters(alias: str) -> dict[str, Any]:
    """``psycopg.connect`` keywords for a connection of its own to ``alias``'s database
    (the test database, under a test runner), without Django's cursor machinery."""
    parameters: dict[str, Any] = connections[alias].get_connection_params()
    for name in _DJANGO_ONLY_PARAMETERS:
        parameters.pop(name, None)
    parameters.setdefault("connect_timeout", CONNECT_TIMEOUT_SECONDS)
    return parameters


class PostgresSubscription:
    """``LISTEN channel`` on a connection of its own, filtered to ``queues``.

    :meth:`wait` selects on the connection's socket (and on a pipe that :meth:`close`
    writes to, so closing from another thread ends a wait at once). A lost connection is
    reopened with a bounded backoff; meanwhile :meth:`wait` just waits out its timeout and
    answers ``False``. After a reconnect it answers ``True`` once, since hints sent while
    it was away are lost. Meant for one waiting thread at a time.
    """

    def __init__(self, parameters: Mapping[str, Any], channel: str, queues: frozenset[str]) -> None:
        self.channel = channel
        self.queues = queues
        self._parameters = dict(parameters)
        self._lock = threading.Lock()
        self._closed = False
        self._released = False
        self._waiting = False
        self._wake_read, self._wake_write = os.pipe()
        os.set_blocking(self._wake_write, False)
        self._connection: Any = None
        self._selector: selectors.BaseSelector | None = None
        self._payloads: frozenset[bytes] = frozenset()
        self._failures = 0
        self._retry_at = 0.0
        self._missed = False
        self._connect()

    @property
    def connected(self) -> bool:
        return self._connection is not None

    def wait(self, timeout: float) -> bool:
        deadline = time.monotonic() + max(0.0, timeout)
        with self._lock:
            if self._closed:
                return False
            self._waiting = True
        try:
            return self._wait_until(deadline)
        except Exception as error:  # a hint is never worth an exception in the worker's loop
            logger.warning("wake-up listener failed; retrying later", exc_info=True)
            self._drop()
            self._failed(error)
            return False
        finally:
            with self._lock:
                self._waiting = False
                release = self._closed
            if release:
                self._release()

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            if self._waiting:
                os.write(self._wake_write, b"\0")  # the waiting thread releases
                return
        self._release()

    # -- internals --------------------------------------------------------------------

    def _wait_until(self, deadline: float) -> bool:
        while True:
            if self._connection is None and time.monotonic() >= self._retry_at:
                self._connect()
            if self._missed:
                self._missed = False
                return True
            connection = self._connection
            remaining = deadline - time.monotonic()
            if connection is None:
                if remaining <= 0:
                    return False
                if self._pause(min(remaining, self._retry_at - time.monotonic())):
                    return False
                continue
            try:
                if self._drain(connection):
                    return True
                if remaining <= 0:
                    return False
                assert self._selector is not None  # made with the connection
                readable = [key.fd for key, _ in self._selector.select(remaining)]
            except Exception as error:
                self._lost(error)
                continue
            if self._wake_read in readable:
                return False

    def _drain(self, connection: Any) -> bool:
        """Read every notification already received; whether one is for our queues.

        Read from libpq directly, without the driver's generator and lock: this runs
        between a hint's arrival and the worker's claim, and once it listens, nothing
        else reads from this connection (what the driver buffered while ``LISTEN`` ran
        is taken in :meth:`_connect`). Payloads are compared as libpq hands them over,
        bytes in the session's encoding."""
        pgconn = connection.pgconn
        pgconn.consume_input()
        woken = False
        while (notification := pgconn.notifies()) is not None:
            woken = woken or notification.extra in self._payloads
        return woken

    def _pause(self, seconds: float) -> bool:
        """Sleep ``seconds`` unless closed meanwhile; whether closed."""
        return bool(_readable([self._wake_read], seconds))

    def _connect(self) -> None:
        import psycopg
        from psycopg import sql

        try:
            connection = psycopg.connect(**self._parameters, autocommit=True)
        except Exception as error:
            self._failed(error)
            return
        selector: selectors.BaseSelector | None = None
        try:
            connection.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.channel)))
            # What the driver read while LISTEN ran waits in its own backlog, which the
            # direct reads of _drain never see: taken here, once.
            payloads = [n.payload for n in connection.notifies(timeout=0)]
            selector = selectors.DefaultSelector()
            selector.register(connection.fileno(), selectors.EVENT_READ)
            selector.register(self._wake_read, selectors.EVENT_READ)
        except Exception as error:
            if selector is not None:
                selector.close()
            connection.close()
            self._failed(error)
            return
        heard = not self.queues.isdisjoint(payloads)
        if self._failures:
            logger.info("wake-up listener reconnected after %d failures", self._failures)
            heard = True  # hints sent while it was away are lost
        self._missed = self._missed or heard
        self._failures = 0
        self._payloads = frozenset(q.encode(connection.info.encoding) for q in self.queues)
        self._selector = selector  # one for the connection's life, not one per wait
        self._connection = connection

    def _failed(self, error: Exception) -> None:
        self._failures += 1
        delay = min(LONGEST_RETRY_SECONDS, FIRST_RETRY_SECONDS * 2 ** (self._failures - 1))
        self._retry_at = time.monotonic() + delay
        log = logger.warning if self._failures == 1 else logger.debug
        log("wake-up listener cannot connect (%s); retrying in %.2fs", error, delay)

    def _lost(self, error: Exception) -> None:
        self._drop()
        self._failed(error)
        self._retry_at = time.monotonic()  # the first reconnect is immediate

    def _drop(self) -> None:
        connection, self._connection = self._connection, None
        selector, self._selector = self._selector, None
        if selector is not None:
            selector.close()
        if connection is not None:
            try:
                connection.close()
            except Exception:
                logger.debug("closing a broken listener connection failed", exc_info=True)

    def _release(self) -> None:
        if self._released:
            return
        self._released = True
        self._drop()
        os.close(self._wake_read)
        os.close(self._wake_write)


def _readable(fds: list[int], timeout: float) -> set[int]:
    """Which of ``fds`` become readable within ``timeout`` seconds (any descriptor
    number, unlike ``select.select``)."""
    with selectors.DefaultSelector() as selector:
        for fd in fds:
            selector.register(fd, selectors.EVENT_READ)
        return {key.fd for key, _ in selector.select(max(0.0, timeout))}
