"""Wake-up hints on PostgreSQL: ``pg_notify`` in the storage call's transaction, heard on
a listener's dedicated connection, in any process.

Configured by MILLRACE_TEST_POSTGRES_URL (``scripts/testdb.sh`` starts a throwaway server);
skipped when unset, except in CI, where it fails.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import timedelta

import psycopg
import pytest
from django.db import connections, transaction
from django.test.utils import CaptureQueriesContext
from psycopg import sql

from millrace_django.clock import FakeClock
from millrace_django.conformance.support import (
    claim,
    claim_new,
    fail,
    make_job,
    make_recurring,
    release,
    succeed,
)
from millrace_django.contract import (
    Capabilities,
    FireOutcome,
    JobRecord,
    JobState,
    Limit,
    queue_scope,
)
from millrace_django.storage.orm import DjangoStorage
from millrace_django.storage.orm.notify import (
    DEFAULT_CHANNEL,
    PostgresSubscription,
    listener_parameters,
)
from tests.conformance.django_harness import DjangoStoreUnderTest, require_alias
from tests.integration.notifications import HINT_SECONDS, QUIET_SECONDS, in_thread, store_on

ALIAS = "postgres"
require_alias(ALIAS, "MILLRACE_TEST_POSTGRES_URL")
pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True, databases=[ALIAS])]

MARKER = "marker"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store(clock: FakeClock) -> Iterator[DjangoStoreUnderTest]:
    with store_on(ALIAS, clock) as store:
        yield store


@pytest.fixture
def storage(store: DjangoStoreUnderTest) -> DjangoStorage:
    return store.jobs


@pytest.fixture
def listener(storage: DjangoStorage) -> Iterator[PostgresSubscription]:
    subscription = storage.listen({"q"})
    assert isinstance(subscription, PostgresSubscription)
    yield subscription
    subscription.close()


class Channel:
    """Every payload sent on the storage's channel, read on a raw connection: notifications
    arrive in commit order, so what was sent before a marker arrives before it."""

    def __init__(self) -> None:
        self._connection = psycopg.connect(**listener_parameters(ALIAS), autocommit=True)
        self._connection.execute(sql.SQL("LISTEN {}").format(sql.Identifier(DEFAULT_CHANNEL)))

    def payloads_before_marker(self, storage: DjangoStorage, clock: FakeClock) -> list[str]:
        """Commit an enqueue to the marker queue, then everything heard up to it."""
        storage.enqueue([make_job(clock, queue=MARKER)])
        heard: list[str] = []
        for notification in self._connection.notifies(timeout=HINT_SECONDS):
            if notification.payload == MARKER:
                return heard
            heard.append(notification.payload)
        raise AssertionError(f"the marker's hint never came (heard {heard})")

    def close(self) -> None:
        self._connection.close()


@pytest.fixture
def channel() -> Iterator[Channel]:
    opened = Channel()
    yield opened
    opened.close()


def test_the_storage_advertises_notifications(storage: DjangoStorage) -> None:
    assert Capabilities.NOTIFICATIONS in storage.capabilities


def test_a_listener_is_woken_by_an_enqueue_committed_on_another_connection(
    storage: DjangoStorage, listener: PostgresSubscription, clock: FakeClock
) -> None:
    assert not listener.wait(0), "a hint before anything was enqueued"

    in_thread(ALIAS, lambda: storage.enqueue([make_job(clock, queue="q")]))

    assert listener.wait(HINT_SECONDS)


def test_a_listener_of_a_queue_named_beyond_ascii_hears_its_queue_only(
    storage: DjangoStorage, listener: PostgresSubscription, clock: FakeClock
) -> None:
    """The listener matches payloads as libpq hands them over: bytes, in the session's
    encoding."""
    queue = "größe-ü-队列"
    subscription = storage.listen({queue})
    assert isinstance(subscription, PostgresSubscription)
    try:
        in_thread(ALIAS, lambda: storage.enqueue([make_job(clock, queue=queue)]))

        assert subscription.wait(HINT_SECONDS)
        assert not listener.wait(QUIET_SECONDS), "a hint for another queue woke 'q'"
    finally:
        subscription.close()


def test_hints_for_a_burst_of_enqueues_coalesce(
    storage: DjangoStorage, listener: PostgresSubscription, clock: FakeClock, channel: Channel
) -> None:
    for _ in range(5):
        storage.enqueue([make_job(clock, queue="q")])
    channel.payloads_before_marker(storage, clock)  # all five were delivered by now

    assert listener.wait(HINT_SECONDS)
    assert not listener.wait(QUIET_SECONDS), "one wait should have taken the whole burst"


def test_a_listener_is_not_woken_for_another_queue(
    storage: DjangoStorage, listener: PostgresSubscription, clock: FakeClock
) -> None:
    other = storage.listen({"other"})
    try:
        in_thread(ALIAS, lambda: storage.enqueue([make_job(clock, queue="other")]))

        assert other.wait(HINT_SECONDS), "the hint was not sent at all"
        assert not listener.wait(QUIET_SECONDS)
    finally:
        other.close()


def test_an_enqueue_rolled_back_with_the_callers_transaction_wakes_nobody(
    storage: DjangoStorage, clock: FakeClock, channel: Channel
) -> None:
    job = make_job(clock, queue="q")
    with pytest.raises(RuntimeError), transaction.atomic(using=ALIAS):
        storage.enqueue([job])
        raise RuntimeError("the caller changed its mind")

    assert channel.payloads_before_marker(storage, clock) == []
    assert storage.get_job(job.id) is None


def test_a_hint_arrives_only_when_the_enqueuing_transaction_commits(
    storage: DjangoStorage, listener: PostgresSubscription, clock: FakeClock
) -> None:
    enqueued, commit = threading.Event(), threading.Event()

    def enqueue_then_hold_the_transaction_open() -> None:
        try:
            with transaction.atomic(using=ALIAS):
                storage.enqueue([make_job(clock, queue="q")])
                enqueued.set()
                commit.wait(HINT_SECONDS)
        finally:
            connections[ALIAS].close()

    holder = threading.Thread(target=enqueue_then_hold_the_transaction_open)
    holder.start()
    try:
        assert enqueued.wait(HINT_SECONDS)
        assert not listener.wait(QUIET_SECONDS), "woken before the transaction committed"
    finally:
        commit.set()
        holder.join(HINT_SECONDS)
    assert listener.wait(HINT_SECONDS)


def test_one_hint_per_distinct_queue_per_transaction(
    storage: DjangoStorage, clock: FakeClock, channel: Channel
) -> None:
    storage.enqueue([make_job(clock, queue=q) for q in ("q", "q", "r", "q", "r")])

    assert sorted(channel.payloads_before_marker(storage, clock)) == ["q", "r"]


def test_scheduled_jobs_send_no_hint_until_activation_makes_them_claimable(
    storage: DjangoStorage, clock: FakeClock, channel: Channel
) -> None:
    storage.enqueue(
        [make_job(clock, queue="q", state=JobState.SCHEDULED, due_at=clock.now() + timedelta(1))]
    )
    assert channel.payloads_before_marker(storage, clock) == []

    assert storage.activate_due(clock.now() + timedelta(days=2), 10) == 1

    assert channel.payloads_before_marker(storage, clock) == ["q"]


def test_run_now_release_and_continuation_activation_send_hints(
    store: DjangoStoreUnderTest, storage: DjangoStorage, clock: FakeClock, channel: Channel
) -> None:
    failed = claim_new(store, clock, "retry")
    assert storage.apply(fail(failed, clock, retry_in=timedelta(hours=1)))
    released = claim_new(store, clock, "released")
    parent = claim_new(store, clock, "parent")
    storage.enqueue([make_job(clock, queue="child", state=JobState.AWAITING, parent_id=parent.id)])
    channel.payloads_before_marker(storage, clock)  # forget the set-up's own hints

    assert storage.try_run_now(failed.id)
    assert storage.apply(release(released))
    assert storage.apply_many([succeed(parent, clock, activate_continuations=True)]) == [True]

    assert channel.payloads_before_marker(storage, clock) == ["retry", "released", "child"]


def test_a_limited_job_ending_hints_its_queue_that_a_slot_is_free(
    store: DjangoStoreUnderTest, storage: DjangoStorage, clock: FakeClock, channel: Channel
) -> None:
    def limited(queue: str) -> JobRecord:
        limit = Limit(scope=queue_scope(queue), concurrency=1)
        return claim_new(store, clock, queue, limits=(limit,))

    succeeded, failed = limited("limited-a"), limited("limited-b")
    plain = claim_new(store, clock, "plain")
    channel.payloads_before_marker(storage, clock)

    assert storage.apply_many([succeed(succeeded, clock), succeed(plain, clock)]) == [True, True]
    assert storage.apply(fail(failed, clock, retry_in=timedelta(hours=1)))

    assert channel.payloads_before_marker(storage, clock) == ["limited-a", "limited-b"]


def test_a_recurring_fire_sends_a_hint(
    storage: DjangoStorage, clock: FakeClock, listener: PostgresSubscription
) -> None:
    definition = make_recurring(clock, queue="q")
    storage.upsert_recurring(definition)
    assert not listener.wait(0)

    fired = storage.try_fire_recurring(
        definition.id,
        definition.next_fire_time,
        definition.next_fire_time + timedelta(days=1),
        make_job(clock, queue="q", recurring_id=definition.id),
    )

    assert fired is FireOutcome.FIRED
    assert listener.wait(HINT_SECONDS)


def test_claims_and_acknowledgements_that_enqueue_nothing_send_no_notify(
    store: DjangoStoreUnderTest, storage: DjangoStorage, clock: FakeClock, channel: Channel
) -> None:
    storage.enqueue([make_job(clock, queue="q") for _ in range(3)])
    channel.payloads_before_marker(storage, clock)  # forget the enqueue's own hint

    claimed = claim(store, queues=("q",), max_count=3)
    assert len(claimed) == 3
    assert storage.apply_many([succeed(job, clock) for job in claimed]) == [True] * 3

    assert channel.payloads_before_marker(storage, clock) == []


def test_an_enqueue_notifies_in_one_extra_statement(
    storage: DjangoStorage, clock: FakeClock
) -> None:
    with CaptureQueriesContext(connections[ALIAS]) as captured:
        storage.enqueue([make_job(clock, queue=q) for q in ("q", "r")])

    assert len([q for q in captured.captured_queries if "pg_notify" in q["sql"]]) == 1


def test_the_listener_reconnects_after_losing_its_connection(
    storage: DjangoStorage, listener: PostgresSubscription, clock: FakeClock
) -> None:
    with connections[ALIAS].cursor() as cursor:
        cursor.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND query LIKE 'LISTEN%%'"
        )

    assert listener.wait(HINT_SECONDS), "a reconnect should wake once (hints were missed)"
    assert listener.connected
    assert not listener.wait(0)

    storage.enqueue([make_job(clock, queue="q")])

    assert listener.wait(HINT_SECONDS)


def test_a_listener_that_cannot_connect_waits_quietly_and_never_raises() -> None:
    parameters = {**listener_parameters(ALIAS), "dbname": "no_such_database"}
    subscription = PostgresSubscription(parameters, DEFAULT_CHANNEL, frozenset({"q"}))
    try:
        assert not subscription.connected
        assert not subscription.wait(QUIET_SECONDS)
    finally:
        subscription.close()


def test_closing_from_another_thread_ends_a_wait_at_once(listener: PostgresSubscription) -> None:
    outcome: list[bool] = []
    waiter = threading.Thread(target=lambda: outcome.append(listener.wait(60)))
    waiter.start()

    listener.close()
    waiter.join(HINT_SECONDS)

    assert not waiter.is_alive()
    assert outcome == [False]
    assert not listener.connected
