"""Batches: one enqueue call is all-or-nothing and answers position by position."""

from __future__ import annotations

from typing import ClassVar

import pytest

from millrace_django.clock import FakeClock
from millrace_django.conformance.harness import StoreUnderTest
from millrace_django.conformance.suite import FactGroup
from millrace_django.conformance.support import (
    claim,
    enqueue,
    make_job,
    stored_job,
    with_fields,
)
from millrace_django.contract import JobState
from millrace_django.errors import DuplicateJobId


class BatchFacts(FactGroup):
    heading: ClassVar[str] = "Batches"

    def test_enqueue_returns_effective_ids_positionally(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """A batch mixing fresh jobs and a held key returns each position's effective id."""
        existing = enqueue(store, clock, queue="held", idempotency_key="k")
        fresh_1 = make_job(clock, idempotency_key="k1")
        duplicate = make_job(clock, idempotency_key="k")
        fresh_2 = make_job(clock)

        ids = store.jobs.enqueue([fresh_1, duplicate, fresh_2])

        assert ids == [fresh_1.id, existing, fresh_2.id]
        assert store.jobs.get_job(duplicate.id) is None
        for job in (fresh_1, fresh_2):
            assert stored_job(store, job.id).state is JobState.ENQUEUED
        claimed = claim(store, "w1", max_count=10)
        assert [job.id for job in claimed] == [fresh_1.id, fresh_2.id]

    def test_an_enqueue_batch_with_a_duplicate_job_id_throws_and_persists_nothing(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """An id already stored, or repeated in the batch, raises DuplicateJobId; none is kept."""
        existing_id = enqueue(store, clock, queue="held")
        existing = stored_job(store, existing_id)
        fresh = make_job(clock, idempotency_key="fresh")
        clash = make_job(clock, id=existing_id, queue="default", priority=5)

        with pytest.raises(DuplicateJobId) as stored_clash:
            store.jobs.enqueue([fresh, clash])

        assert stored_clash.value.job_id == existing_id
        assert store.jobs.get_job(fresh.id) is None
        assert store.jobs.get_job(existing_id) == existing

        first = make_job(clock, idempotency_key="first")
        twin = with_fields(make_job(clock, queue="other"), id=first.id)
        with pytest.raises(DuplicateJobId) as batch_clash:
            store.jobs.enqueue([first, twin])

        assert batch_clash.value.job_id == first.id
        assert store.jobs.get_job(first.id) is None
        assert claim(store, "w1", queues=["default", "other"], max_count=10) == []
        retry = make_job(clock, idempotency_key="fresh")
        assert store.jobs.enqueue([retry]) == [retry.id]
        again = make_job(clock, idempotency_key="first")
        assert store.jobs.enqueue([again]) == [again.id]

    def test_an_empty_batch_is_a_noop_returning_no_ids(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Enqueuing an empty batch returns an empty list and stores nothing."""
        assert store.jobs.enqueue([]) == []
        assert claim(store, "w1", max_count=10) == []
        job = make_job(clock)
        assert store.jobs.enqueue([job]) == [job.id]
        assert store.jobs.enqueue([]) == []
        claimed = claim(store, "w1", max_count=10)
        assert [c.id for c in claimed] == [job.id]
