"""A limit's row forgotten while a claim waits for it, on PostgreSQL: the claim starts
again (it would otherwise decide without the scope's lock, and write its start to no row).

Configured by MILLRACE_TEST_POSTGRES_URL; skipped when unset, except in CI.
"""

from __future__ import annotations

import threading
import time
from datetime import timedelta

import pytest
from django.db import connections, transaction

from millrace_django.clock import FakeClock
from millrace_django.conformance.support import make_job
from millrace_django.contract import ClaimRequest, JobRecord, Limit, Rate
from millrace_django.models import Limit as LimitRow
from millrace_django.storage.orm import DjangoStorage
from tests.conformance.django_harness import DjangoStoreUnderTest, require_alias
from tests.integration.test_postgres_hot_path import clock, store

ALIAS = "postgres"
require_alias(ALIAS, "MILLRACE_TEST_POSTGRES_URL")
pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True, databases=[ALIAS])]
__all__ = ["clock", "store"]  # the fixtures, shared

SCOPE = "job:forgotten"
DAILY = (Limit(scope=SCOPE, rate=Rate(5, timedelta(days=1))),)


def waiting_for_a_lock() -> bool:
    """Whether a session of the test database waits for a lock (read afresh: inside a
    transaction the activity view is a snapshot taken at its first read)."""
    with connections[ALIAS].cursor() as cursor:
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        return cursor.fetchone()[0] > 0


def test_a_claim_whose_scope_row_was_forgotten_while_it_waited_starts_again(
    store: DjangoStoreUnderTest, clock: FakeClock
) -> None:
    storage: DjangoStorage = store.jobs  # type: ignore[assignment]
    first, second = make_job(clock, limits=DAILY), make_job(clock, limits=DAILY)
    storage.enqueue([first])
    request = ClaimRequest(
        worker_id="w1", queues=frozenset({"default"}), max_count=1, lease=timedelta(minutes=5)
    )
    assert [job.id for job in storage.claim(request)] == [first.id]  # the row exists now
    storage.enqueue([second])
    claimed: list[JobRecord] = []

    failed: list[BaseException] = []

    def claim() -> None:
        try:
            claimed.extend(storage.claim(request))
        except BaseException as error:
            failed.append(error)
        finally:
            connections[ALIAS].close()

    with transaction.atomic(using=ALIAS):  # a forgetter holding the row
        LimitRow.objects.using(ALIAS).select_for_update().get(scope=SCOPE)
        claimer = threading.Thread(target=claim)
        claimer.start()
        deadline = time.monotonic() + 10
        while not waiting_for_a_lock():
            assert not failed, failed
            assert time.monotonic() < deadline, "the claim never waited for the row"
            time.sleep(0.01)
        LimitRow.objects.using(ALIAS).filter(scope=SCOPE).delete()
    claimer.join(10)

    assert [job.id for job in claimed] == [second.id]
    row = LimitRow.objects.using(ALIAS).get(scope=SCOPE)  # made again, its start kept
    assert len(row.starts) == 1
