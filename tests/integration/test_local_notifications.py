"""Wake-up hints where the database has no channel of its own (SQLite, MariaDB; SQL
Server too): published in-process when the storage call's transaction commits.

A worker in another process is not woken: it finds the jobs at its next poll.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.conf import settings
from django.db import transaction

from millrace_django.clock import FakeClock
from millrace_django.conformance.support import (
    claim_new,
    fail,
    make_job,
    make_recurring,
    release,
    succeed,
)
from millrace_django.contract import Capabilities, FireOutcome, JobState, WakeupSubscription
from millrace_django.storage.orm import DjangoStorage
from tests.conformance.django_harness import DjangoStoreUnderTest
from tests.integration.notifications import HINT_SECONDS, in_thread, store_on

ALIASES = [alias for alias in ("default", "mariadb", "sqlserver") if alias in settings.DATABASES]
pytestmark = pytest.mark.django_db(transaction=True, databases=ALIASES)


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(params=ALIASES)
def store(request: pytest.FixtureRequest, clock: FakeClock) -> Iterator[DjangoStoreUnderTest]:
    with store_on(request.param, clock) as store:
        yield store


@pytest.fixture
def storage(store: DjangoStoreUnderTest) -> DjangoStorage:
    return store.jobs


@pytest.fixture
def listener(storage: DjangoStorage) -> Iterator[WakeupSubscription]:
    subscription = storage.listen({"q"})
    yield subscription
    subscription.close()


def test_the_storage_advertises_notifications(storage: DjangoStorage) -> None:
    assert Capabilities.NOTIFICATIONS in storage.capabilities


def test_a_listener_in_the_same_process_is_woken_by_an_enqueue_in_another_thread(
    storage: DjangoStorage, listener: WakeupSubscription, clock: FakeClock
) -> None:
    assert not listener.wait(0)

    in_thread(storage.alias, lambda: storage.enqueue([make_job(clock, queue="q")]))

    assert listener.wait(HINT_SECONDS)


def test_a_listener_is_not_woken_for_another_queue(
    storage: DjangoStorage, listener: WakeupSubscription, clock: FakeClock
) -> None:
    storage.enqueue([make_job(clock, queue="other")])

    assert not listener.wait(0)  # published synchronously at commit: nothing can be late


def test_a_hint_is_published_when_the_callers_transaction_commits_not_before(
    storage: DjangoStorage, listener: WakeupSubscription, clock: FakeClock
) -> None:
    with transaction.atomic(using=storage.alias):
        storage.enqueue([make_job(clock, queue="q")])
        assert not listener.wait(0)

    assert listener.wait(0)


def test_an_enqueue_rolled_back_with_the_callers_transaction_wakes_nobody(
    storage: DjangoStorage, listener: WakeupSubscription, clock: FakeClock
) -> None:
    with pytest.raises(RuntimeError), transaction.atomic(using=storage.alias):
        storage.enqueue([make_job(clock, queue="q")])
        raise RuntimeError("the caller changed its mind")

    assert not listener.wait(0)


def test_activation_run_now_release_fire_and_continuations_wake_the_listener(
    store: DjangoStoreUnderTest, storage: DjangoStorage, clock: FakeClock
) -> None:
    scheduled = make_job(clock, queue="due", state=JobState.SCHEDULED, due_at=clock.now())
    storage.enqueue([scheduled])
    failed = claim_new(store, clock, "retry")
    assert storage.apply(fail(failed, clock, retry_in=timedelta(hours=1)))
    released = claim_new(store, clock, "released")
    parent = claim_new(store, clock, "parent")
    storage.enqueue([make_job(clock, queue="child", state=JobState.AWAITING, parent_id=parent.id)])
    definition = make_recurring(clock, queue="fired")
    storage.upsert_recurring(definition)

    def woken_by(queue: str) -> WakeupSubscription:
        subscription = storage.listen({queue})
        assert not subscription.wait(0)
        return subscription

    moves = {
        "due": lambda: storage.activate_due(clock.now(), 10) == 1,
        "retry": lambda: storage.try_run_now(failed.id),
        "released": lambda: storage.apply(release(released)),
        "child": lambda: (
            storage.apply_many([succeed(parent, clock, activate_continuations=True)]) == [True]
        ),
        "fired": lambda: (
            storage.try_fire_recurring(
                definition.id,
                definition.next_fire_time,
                definition.next_fire_time + timedelta(days=1),
                make_job(clock, queue="fired", recurring_id=definition.id),
            )
            is FireOutcome.FIRED
        ),
    }
    for queue, move in moves.items():
        subscription = woken_by(queue)
        try:
            assert move(), f"the {queue!r} move did not happen"
            assert subscription.wait(0), f"the {queue!r} move woke nobody"
        finally:
            subscription.close()
