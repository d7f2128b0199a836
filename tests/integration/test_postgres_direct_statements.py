"""The PostgreSQL hot statements sent on the driver's connection, without Django's cursor:
only while nothing needs to see them, with their text intact, bounded by the storage
call's statement timeout as before, errors translated and lost prepared statements
replayed as before.

Configured by MILLRACE_TEST_POSTGRES_URL (``scripts/testdb.sh`` starts a throwaway server);
skipped when unset, except in CI, where it fails.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from django.db import (
    DatabaseError,
    DataError,
    OperationalError,
    connections,
    reset_queries,
    transaction,
)
from django.test.utils import CaptureQueriesContext, override_settings
from psycopg.conninfo import make_conninfo

from millrace_django.clock import FakeClock
from millrace_django.conformance.support import make_job, make_recurring, succeed
from millrace_django.contract import ClaimRequest, Invocation, JobRecord, JobState
from millrace_django.ids import new_id
from millrace_django.storage.orm import DjangoStorage
from millrace_django.storage.orm.postgresql.session import session_of
from tests.conformance.django_harness import require_alias
from tests.integration.notifications import store_on
from tests.reliability.faults import CompletionBlocker, TableLock

ALIAS = "postgres"
require_alias(ALIAS, "MILLRACE_TEST_POSTGRES_URL")
pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True, databases=[ALIAS])]

LEASE = timedelta(minutes=5)
AWKWARD = (
    "it's ''quoted'', back\\slash \\' \\\\, \"double\", E'x', $1 $$ %s %(rows)s {rows} {}, "
    "'); DROP TABLE millrace_job; --, tab\there, line\nbreak, \u00fc\u20ac\U0001f600"
)
"""Text a hand-written SQL literal could get wrong: quotes, backslashes, placeholders."""
TIMEOUT = timedelta(seconds=0.3)
LOCK_AT_MOST = timedelta(seconds=10)
"""The table lock ends itself after this long: a statement left unbounded then completes
(the test fails, in bounded time) instead of waiting for ever."""
QUERY_CANCELED = "57014"
HOT_STATEMENT = re.compile(r"EXECUTE millrace_(\w+)_[0-9a-f]{10} \(")


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def storage(clock: FakeClock) -> Iterator[DjangoStorage]:
    """A storage on the alias, its tables emptied before and after."""
    with store_on(ALIAS, clock) as store:
        yield store.jobs


def exercise(storage: DjangoStorage, clock: FakeClock, text: str) -> set[str]:
    """Every hot statement, run with ``text`` in each text parameter and checked: a plain
    and a keyed enqueue, a claim of one queue and of several, an acknowledgement that
    wakes a continuation and one that does not. The purposes the statements serve."""
    queue, other, worker = f"q {text}", f"r {text}", f"w {text}"
    plain = make_job(
        clock,
        queue=queue,
        invocation=Invocation(target="pkg.mod:fn", args=[text, [text]], kwargs={text: text}),
        tenant_id=text,
        last_error=text,
    )
    keyed = make_job(clock, queue=other, idempotency_key=text, tenant_id=text)
    assert storage.enqueue([plain]) == [plain.id]
    assert storage.enqueue([keyed]) == [keyed.id]
    assert storage.enqueue([replace(keyed, id=new_id(clock))]) == [keyed.id]
    assert storage.get_job(plain.id) == plain
    assert storage.get_job(keyed.id) == keyed

    (first,) = storage.claim(_request(worker, queue))
    (second,) = storage.claim(_request(worker, queue, other))
    assert (first.id, first.worker_id, first.queue) == (plain.id, worker, queue)
    assert (second.id, second.worker_id, second.tenant_id) == (keyed.id, worker, text)

    child = make_job(clock, queue=queue, state=JobState.AWAITING, parent_id=first.id)
    assert storage.enqueue([child]) == [child.id]
    woke = succeed(first, clock, activate_continuations=True, result=text)
    assert storage.apply_many([woke]) == [True]
    assert storage.apply_many([succeed(second, clock, result={text: [text]})]) == [True]
    assert _stored(storage, first.id).result == text
    assert _stored(storage, second.id).result == {text: [text]}
    assert _stored(storage, child.id).state is JobState.ENQUEUED
    return _purposes_of(storage)


def _request(worker: str, *queues: str) -> ClaimRequest:
    return ClaimRequest(worker_id=worker, queues=frozenset(queues), max_count=5, lease=LEASE)


def _stored(storage: DjangoStorage, job_id: Any) -> JobRecord:
    job = storage.get_job(job_id)
    assert job is not None
    return job


def _purposes_of(storage: DjangoStorage) -> set[str]:
    """The hot statements :func:`exercise` runs on ``storage``."""
    keyed = "insert_scoped" if storage._jobs._ctx.track_scope else "insert_keyed"
    return {"insert", keyed, "claim", "claim_queues", "complete", "wake"}


@contextmanager
def driver_cursors_opened() -> Iterator[list[object]]:
    """The driver cursors opened on the storage's connection meanwhile (each Django
    cursor opens one)."""
    raw = connections[ALIAS].connection
    factory = raw.cursor_factory
    opened: list[object] = []

    class Counted(factory):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            opened.append(self)

    raw.cursor_factory = Counted
    try:
        yield opened
    finally:
        raw.cursor_factory = factory


def test_hot_statements_skip_djangos_cursor_while_nothing_watches(
    storage: DjangoStorage, clock: FakeClock
) -> None:
    for _ in range(2):  # the first round prepares each statement and opens the cursor
        jobs = [make_job(clock) for _ in range(3)]
        with driver_cursors_opened() as opened:
            for job in jobs:
                storage.enqueue([job])
            claimed = storage.claim(_request("w1", "default"))
            claimed += storage.claim(_request("w1", "default", "other"))
            assert storage.apply_many([succeed(job, clock) for job in claimed]) == [True] * 3
    assert opened == []


def _captured() -> AbstractContextManager[list[str]]:
    @contextmanager
    def capture() -> Iterator[list[str]]:
        with CaptureQueriesContext(connections[ALIAS]) as context:
            sent: list[str] = []
            yield sent
        sent += [query["sql"] for query in context.captured_queries]

    return capture()


def _logged_under_debug() -> AbstractContextManager[list[str]]:
    @contextmanager
    def log() -> Iterator[list[str]]:
        with override_settings(DEBUG=True):
            reset_queries()
            sent: list[str] = []
            yield sent
            sent += [query["sql"] for query in connections[ALIAS].queries]

    return log()


def _wrapped() -> AbstractContextManager[list[str]]:
    @contextmanager
    def watch() -> Iterator[list[str]]:
        sent: list[str] = []

        def record(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
            sent.append(sql)
            return execute(sql, params, many, context)

        with connections[ALIAS].execute_wrapper(record):
            yield sent

    return watch()


def _wrapped_in_callers_transaction() -> AbstractContextManager[list[str]]:
    """An execute wrapper alone: the storage adds no statement timeout of its own inside
    a caller's transaction."""

    @contextmanager
    def watch() -> Iterator[list[str]]:
        with transaction.atomic(using=ALIAS), _wrapped() as sent:
            yield sent

    return watch()


@pytest.mark.parametrize(
    "watching",
    [_captured, _logged_under_debug, _wrapped, _wrapped_in_callers_transaction],
    ids=["CaptureQueriesContext", "DEBUG", "execute_wrapper", "execute_wrapper_in_atomic"],
)
def test_django_sees_the_hot_statements_while_something_watches(
    storage: DjangoStorage,
    clock: FakeClock,
    watching: Callable[[], AbstractContextManager[list[str]]],
) -> None:
    connections[ALIAS].ensure_connection()
    with watching() as sent, driver_cursors_opened() as opened:
        expected = exercise(storage, clock, "plain")
    seen = {match[1] for sql in sent for match in HOT_STATEMENT.finditer(sql)}
    assert seen == expected, sent
    assert opened, "Django opened no cursor"


def test_awkward_text_round_trips_on_the_driver_connection(
    storage: DjangoStorage, clock: FakeClock
) -> None:
    exercise(storage, clock, AWKWARD)


def test_a_session_reading_backslashes_as_escapes_gets_the_text_exactly(
    storage: DjangoStorage, clock: FakeClock
) -> None:
    """With ``standard_conforming_strings`` off, a literal quoted for it on would lose
    its backslashes: the statements go through Django's cursor, whose driver quotes
    for the session."""
    connection = connections[ALIAS]
    with connection.cursor() as cursor:
        cursor.execute("SET standard_conforming_strings = off")
    try:
        exercise(storage, clock, AWKWARD)
    finally:
        with connection.cursor() as cursor:
            cursor.execute("RESET standard_conforming_strings")


def test_without_server_side_cursors_the_statements_are_not_prepared(clock: FakeClock) -> None:
    """``DISABLE_SERVER_SIDE_CURSORS`` (behind a transaction-mode pooler): plain
    statements, through Django's cursor."""
    settings = connections[ALIAS].settings_dict
    settings["DISABLE_SERVER_SIDE_CURSORS"] = True
    try:
        with store_on(ALIAS, clock) as store, _captured() as sent:
            exercise(store.jobs, clock, AWKWARD)
    finally:
        del settings["DISABLE_SERVER_SIDE_CURSORS"]
    assert not any("PREPARE" in sql or "EXECUTE" in sql for sql in sent), sent
    assert any("jsonb_to_recordset" in sql for sql in sent), sent


def test_a_nul_character_is_refused_as_the_driver_refuses_it(storage: DjangoStorage) -> None:
    with pytest.raises(DataError, match="NUL"):
        storage.claim(_request("w\x00", "default"))


@pytest.mark.parametrize("lost", ["deallocated", "forgotten"])
def test_a_session_that_lost_or_kept_its_prepared_statements_is_replayed(
    storage: DjangoStorage, clock: FakeClock, lost: str
) -> None:
    """A session without the statements we prepared (SQLSTATE 26000) or with those we
    forgot we prepared (42P05): the call is replayed, once, and succeeds."""
    exercise(storage, clock, "first")
    connection = connections[ALIAS]
    if lost == "deallocated":
        with connection.cursor() as cursor:
            cursor.execute("DEALLOCATE ALL")
    else:
        session_of(connection).prepared.clear()
    exercise(storage, clock, "again")


def test_a_message_that_failed_before_all_its_prepares_ran_leaves_later_calls_working(
    storage: DjangoStorage, clock: FakeClock
) -> None:
    """The first acknowledgement of a session that wakes continuations carries both
    ``PREPARE``s; when its update fails, the server never runs the second. Every later
    acknowledgement used to fail for good (the wake statement "does not exist", then,
    all forgotten, the other "already exists", and so on), as a reliability scenario
    found; now what the session prepared is read back and the next call succeeds."""
    connection = connections[ALIAS]
    with connection.cursor() as cursor:
        cursor.execute("DEALLOCATE ALL")
    session_of(connection).prepared.clear()
    parent = make_job(clock)
    storage.enqueue([parent])
    child = make_job(clock, state=JobState.AWAITING, parent_id=parent.id)
    storage.enqueue([child])
    (claimed,) = storage.claim(_request("w", parent.queue))
    woke = succeed(claimed, clock, activate_continuations=True)
    blocker = CompletionBlocker(_test_database_url())
    blocker.install()
    try:
        blocker.block()
        with pytest.raises(DatabaseError):
            storage.apply_many([woke])
        blocker.unblock()
        assert storage.apply_many([woke]) == [True]
    finally:
        blocker.uninstall()
    assert _stored(storage, parent.id).state is JobState.SUCCEEDED
    assert _stored(storage, child.id).state is JobState.ENQUEUED


@pytest.fixture
def bounded(storage: DjangoStorage, clock: FakeClock) -> DjangoStorage:
    """A storage whose statements are bounded by :data:`TIMEOUT`, on the tables ``storage``
    empties."""
    return DjangoStorage(ALIAS, clock, statement_timeout=TIMEOUT)


def _fails_within_the_timeout(call: Callable[[], object]) -> None:
    """``call`` waits on the locked jobs table and is cancelled by the statement timeout."""
    started = time.monotonic()
    with pytest.raises(OperationalError) as raised:
        call()
    took = time.monotonic() - started
    assert getattr(raised.value.__cause__, "sqlstate", None) == QUERY_CANCELED, raised.value
    assert TIMEOUT.total_seconds() <= took < LOCK_AT_MOST.total_seconds() / 2, took


def _statement_timeout() -> str:
    with connections[ALIAS].cursor() as cursor:
        cursor.execute("SHOW statement_timeout")
        (setting,) = cursor.fetchone() or ("?",)
    return str(setting)


def _test_database_url() -> str:
    settings = connections[ALIAS].settings_dict
    return make_conninfo(
        dbname=settings["NAME"],
        user=settings["USER"],
        password=settings["PASSWORD"],
        host=settings["HOST"],
        port=settings["PORT"],
    )


def test_each_hot_statement_in_autocommit_is_bounded_and_leaves_no_setting_behind(
    bounded: DjangoStorage, clock: FakeClock
) -> None:
    (claimed,) = _claimed(bounded, clock)
    calls: list[Callable[[], object]] = [
        lambda: bounded.enqueue([make_job(clock)]),
        lambda: bounded.enqueue([make_job(clock, idempotency_key="k")]),
        lambda: bounded.claim(_request("w1", "default")),
        lambda: bounded.claim(_request("w1", "default", "other")),
        lambda: bounded.apply_many([succeed(claimed, clock)]),
        lambda: bounded.apply_many([succeed(claimed, clock, activate_continuations=True)]),
    ]
    with TableLock(_test_database_url(), at_most=LOCK_AT_MOST):
        for call in calls:
            _fails_within_the_timeout(call)
    assert _statement_timeout() == "0", "the storage's bound leaked into the session"


def _claimed(storage: DjangoStorage, clock: FakeClock) -> list[JobRecord]:
    storage.enqueue([make_job(clock)])
    return storage.claim(_request("w1", "default"))


def test_a_hot_statement_later_in_a_storage_transaction_is_bounded(
    bounded: DjangoStorage, clock: FakeClock
) -> None:
    """A recurring fire inserts its job after a statement of its own, in one transaction:
    the timeout its first statement set holds for the insert."""
    record = make_recurring(clock)
    bounded.upsert_recurring(record)
    job = make_job(clock, recurring_id=record.id)
    with TableLock(_test_database_url(), at_most=LOCK_AT_MOST):
        _fails_within_the_timeout(
            lambda: bounded.try_fire_recurring(
                record.id, record.next_fire_time, record.next_fire_time + timedelta(days=1), job
            )
        )
    assert bounded.get_recurring(record.id) == record, "the fire was not rolled back"


def test_inside_a_callers_transaction_the_callers_timeout_holds(
    storage: DjangoStorage, clock: FakeClock
) -> None:
    """The storage's own bound (30 s here) is not imposed on a caller's transaction."""
    with TableLock(_test_database_url(), at_most=LOCK_AT_MOST):

        def enqueue_in_callers_transaction() -> None:
            with transaction.atomic(using=ALIAS), connections[ALIAS].cursor() as cursor:
                milliseconds = int(TIMEOUT.total_seconds() * 1000)
                cursor.execute(f"SET LOCAL statement_timeout = {milliseconds}")
                storage.enqueue([make_job(clock)])

        _fails_within_the_timeout(enqueue_in_callers_transaction)
    assert _statement_timeout() == "0"
