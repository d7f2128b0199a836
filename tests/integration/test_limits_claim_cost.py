"""What limits cost the PostgreSQL claim, in round trips: nothing while no job carries
one (the claim stays one message), and the limited claim only where limited jobs wait.

Configured by MILLRACE_TEST_POSTGRES_URL; skipped when unset, except in CI.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from millrace_django.clock import FakeClock
from millrace_django.conformance.support import make_job, succeed
from millrace_django.contract import ClaimRequest, Limit
from millrace_django.storage.orm import DjangoStorage
from tests.conformance.django_harness import DjangoStoreUnderTest, require_alias
from tests.integration.test_postgres_hot_path import clock, store
from tests.integration.wire import wire_messages

ALIAS = "postgres"
require_alias(ALIAS, "MILLRACE_TEST_POSTGRES_URL")
pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True, databases=[ALIAS])]

ONE = (Limit(scope="job:cost", concurrency=1),)


__all__ = ["clock", "store"]  # the fixtures, shared


def request(count: int) -> ClaimRequest:
    return ClaimRequest(
        worker_id="w1", queues=frozenset({"default"}), max_count=count, lease=timedelta(minutes=5)
    )


def test_a_claim_without_limited_jobs_is_one_message_and_a_limited_job_is_claimed_at_once(
    store: DjangoStoreUnderTest, clock: FakeClock
) -> None:
    storage: DjangoStorage = store.jobs  # type: ignore[assignment]
    storage.enqueue([make_job(clock) for _ in range(4)])

    with wire_messages() as sent:
        assert len(storage.claim(request(2))) == 2
        assert len(storage.claim(request(1))) == 1
    assert len(sent) == 2, sent

    limited = make_job(clock, limits=ONE)
    storage.enqueue([limited, make_job(clock, limits=ONE)])
    with wire_messages() as sent:
        taken = storage.claim(request(5))
    assert {job.id for job in taken} >= {limited.id}, "the limited job waited for a poll"
    assert len(taken) == 2  # the last plain job, and one of the limit of 1
    assert len(sent) > 1  # the plain statement said limited jobs wait: the limited claim ran

    for job in taken:
        assert storage.apply(succeed(job, clock))
    (last,) = storage.claim(request(5))  # the limited claim first: the last one waits
    assert storage.apply(succeed(last, clock))
    assert storage.claim(request(5)) == []  # which says none waits any more
    with wire_messages() as sent:
        assert storage.claim(request(5)) == []
    assert len(sent) == 1, sent
