"""Workflow instances (revision-fenced documents) and bookmarks (durable, consume-once waits)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from functools import partial
from uuid import UUID

import pytest

from millrace_django.clock import FakeClock
from millrace_django.conformance.harness import StoreUnderTest
from millrace_django.conformance.suite import FactGroup
from millrace_django.conformance.support import (
    create_instance,
    job_in_state,
    make_bookmark,
    make_instance,
    make_job,
    race,
    state_of,
    stored_instance,
    stored_job,
    succeed,
    with_fields,
)
from millrace_django.contract import (
    BookmarkRecord,
    InstanceState,
    JobRecord,
    JobState,
    JobTransition,
    NewInstance,
    WorkflowCheckpoint,
    WorkflowInstanceRecord,
)
from millrace_django.errors import ConcurrencyConflict, ParentJobNotFound, StorageError
from millrace_django.ids import new_id

_Resume = Callable[[BookmarkRecord], Sequence[JobRecord]]


def _try_update(store: StoreUnderTest, instance: WorkflowInstanceRecord, expected: int) -> bool:
    try:
        store.workflows.update_instance(instance, expected)
    except ConcurrencyConflict:
        return False
    return True


def _consume(
    store: StoreUnderTest, signal: str, correlation: str, resume: _Resume | None = None
) -> BookmarkRecord | None:
    return store.workflows.consume_bookmark(signal, correlation, resume)


def _checkpoint_or_conflict(store: StoreUnderTest, transition: JobTransition) -> bool | str:
    try:
        return store.jobs.apply(transition)
    except ConcurrencyConflict:
        return "conflict"


def _resume_with(jobs: Sequence[JobRecord]) -> _Resume:
    def build(_bookmark: BookmarkRecord) -> Sequence[JobRecord]:
        return jobs

    return build


class WorkflowStorageFacts(FactGroup):
    """Every fact a :class:`~millrace_django.contract.WorkflowStorage` must hold."""

    heading = "Workflow instances and bookmarks"

    def test_create_and_get_roundtrip_with_revision_one(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Create and get roundtrip with revision one."""
        instance = make_instance(
            clock,
            data={"order": 7, "lines": [1, "two", {"three": None}], "paid": False, "rate": 1.5},
            definition_id="shipping",
            definition_version=3,
            state=InstanceState.SUSPENDED,
            cursor={"node": "pack", "visits": [1, 2]},
            tenant_id="acme",
            updated_at=clock.now() + timedelta(seconds=1),
        )
        store.workflows.create_instance(instance)
        assert store.workflows.get_instance(instance.id) == instance
        assert store.workflows.get_instance(new_id(clock)) is None

    def test_get_instances_reads_many_by_id_and_leaves_unknown_ids_out(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """``get_instances`` returns each stored instance among the ids asked for, equal
        to what ``get_instance`` returns, and leaves out the ids nothing is stored under."""
        first = create_instance(store, clock, data={"n": 1})
        second = create_instance(store, clock, data={"n": 2}, tenant_id="acme")
        create_instance(store, clock, data={"n": 3})
        unknown = new_id(clock)
        found = store.workflows.get_instances([first.id, second.id, unknown])
        assert found == {first.id: first, second.id: second}
        assert store.workflows.get_instances([]) == {}

    def test_create_normalizes_revision_to_one_regardless_of_input(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Create normalizes revision to one regardless of input."""
        instance = make_instance(clock, revision=42)
        store.workflows.create_instance(instance)
        stored = stored_instance(store, instance.id)
        assert stored.revision == 1
        assert stored == with_fields(instance, revision=1)

    def test_duplicate_create_throws_concurrency_exception(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Duplicate create throws concurrency exception."""
        original = create_instance(store, clock, data={"who": "first"})
        clock.advance(timedelta(seconds=1))
        duplicate = with_fields(
            original, data={"who": "second"}, definition_id="other", updated_at=clock.now()
        )
        with pytest.raises(ConcurrencyConflict):
            store.workflows.create_instance(duplicate)
        assert store.workflows.get_instance(original.id) == original

    def test_update_with_matching_revision_increments_it(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Update with matching revision increments it."""
        stored = create_instance(store, clock, data={"step": 1})
        clock.advance(timedelta(seconds=5))
        updated = with_fields(
            stored,
            data={"step": 2, "history": ["a"]},
            cursor={"node": "b"},
            state=InstanceState.SUSPENDED,
            updated_at=clock.now(),
        )
        store.workflows.update_instance(updated, 1)
        assert store.workflows.get_instance(stored.id) == with_fields(updated, revision=2)
        clock.advance(timedelta(seconds=5))
        store.workflows.update_instance(with_fields(updated, data={"step": 3}, revision=2), 2)
        again = stored_instance(store, stored.id)
        assert (again.revision, again.data) == (3, {"step": 3})

    def test_update_with_stale_revision_throws_and_changes_nothing(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Update with stale revision throws and changes nothing."""
        stored = create_instance(store, clock, data={"step": 1})
        current = with_fields(stored, data={"step": 2}, updated_at=clock.now())
        store.workflows.update_instance(current, 1)
        clock.advance(timedelta(seconds=1))
        stale = with_fields(
            stored, data={"step": "stale"}, state=InstanceState.FAILED, updated_at=clock.now()
        )
        with pytest.raises(ConcurrencyConflict):
            store.workflows.update_instance(stale, 1)
        with pytest.raises(ConcurrencyConflict):
            store.workflows.update_instance(stale, 3)
        assert store.workflows.get_instance(stored.id) == with_fields(current, revision=2)

    def test_update_of_missing_instance_throws_concurrency_exception(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Update of missing instance throws concurrency exception."""
        never_created = make_instance(clock)
        with pytest.raises(ConcurrencyConflict):
            store.workflows.update_instance(never_created, 1)
        assert store.workflows.get_instance(never_created.id) is None

    def test_concurrent_updates_have_exactly_one_winner(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Concurrent updates have exactly one winner."""
        racers = self.contention.racers
        for _ in range(self.contention.rounds):
            stored = create_instance(store, clock)
            writes = [with_fields(stored, data={"writer": n}) for n in range(racers)]
            results = race(store, [partial(_try_update, store, write, 1) for write in writes])
            assert results.count(True) == 1, f"winners: {results}"
            winner = writes[results.index(True)]
            assert store.workflows.get_instance(stored.id) == with_fields(winner, revision=2)

    def test_consume_with_no_match_returns_null(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Consume with no match returns null (wrong correlation or wrong signal name)."""
        instance = create_instance(store, clock)
        bookmark = make_bookmark(clock, instance.id, signal_name="approved", correlation_id="o-1")
        store.workflows.add_bookmark(bookmark)
        assert _consume(store, "approved", "o-2") is None
        assert _consume(store, "rejected", "o-1") is None
        assert _consume(store, "Approved", "o-1") is None
        assert _consume(store, "approved", "O-1") is None
        assert _consume(store, "approved", "o-1") == bookmark

    def test_consume_is_at_most_once_under_contention(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Consume is at most once under contention."""
        racers = self.contention.racers
        instance = create_instance(store, clock)
        for round_number in range(self.contention.rounds):
            correlation = f"order-{round_number}"
            bookmark = make_bookmark(clock, instance.id, correlation_id=correlation)
            store.workflows.add_bookmark(bookmark)
            consumer = partial(_consume, store, "approved", correlation)
            results = race(store, [consumer] * racers)
            assert [r for r in results if r is not None] == [bookmark]
            assert _consume(store, "approved", correlation) is None

    def test_consume_returns_the_oldest_matching_bookmark(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Consume returns the oldest matching bookmark (by created_at, whatever the ids)."""
        instance = create_instance(store, clock)
        low_id, high_id = sorted([new_id(clock), new_id(clock)])
        older = make_bookmark(clock, instance.id, id=high_id)
        clock.advance(timedelta(seconds=1))
        newer = make_bookmark(clock, instance.id, id=low_id)
        unrelated = make_bookmark(clock, instance.id, correlation_id="order-2")
        store.workflows.add_bookmark(newer)
        store.workflows.add_bookmark(unrelated)
        store.workflows.add_bookmark(older)
        assert _consume(store, "approved", "order-1") == older
        assert _consume(store, "approved", "order-1") == newer
        assert _consume(store, "approved", "order-1") is None
        assert _consume(store, "approved", "order-2") == unrelated

    def test_consume_breaks_created_at_ties_by_id(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Consume breaks created_at ties by id in RFC 4122 byte order."""
        instance = create_instance(store, clock)
        # Byte order puts `first` before `second`; creation order, little-endian field order
        # (uuid.bytes_le, .NET Guid) and SQL Server uniqueidentifier order all put it after.
        first = UUID("00000001-0000-7000-8000-000000000002")
        second = UUID("01000000-0000-7000-8000-000000000001")
        assert first.bytes < second.bytes
        assert first.bytes_le > second.bytes_le
        assert first.bytes[10:] > second.bytes[10:]
        later = make_bookmark(clock, instance.id, id=second)
        earlier = make_bookmark(clock, instance.id, id=first)
        store.workflows.add_bookmark(later)
        store.workflows.add_bookmark(earlier)
        assert _consume(store, "approved", "order-1") == earlier
        assert _consume(store, "approved", "order-1") == later
        assert _consume(store, "approved", "order-1") is None

    def test_consume_bookmarks_takes_the_oldest_waits_in_order_in_one_atom(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """``consume_bookmarks`` gives each pair, in order, the oldest matching bookmark
        an earlier pair did not take (``None`` when none is left), and stores the jobs
        ``enqueue`` builds from all of them."""
        instance = create_instance(store, clock)
        older = make_bookmark(clock, instance.id)
        clock.advance(timedelta(seconds=1))
        newer = make_bookmark(clock, instance.id)
        other = make_bookmark(clock, instance.id, signal_name="paid", correlation_id="o-9")
        for bookmark in (newer, other, older):
            store.workflows.add_bookmark(bookmark)
        resumes = [make_job(clock, workflow_instance_id=instance.id) for _ in range(3)]
        seen: list[list[BookmarkRecord | None]] = []
        given: list[dict[UUID, WorkflowInstanceRecord]] = []

        def enqueue(
            consumed: Sequence[BookmarkRecord | None],
            instances: Mapping[UUID, WorkflowInstanceRecord],
        ) -> Sequence[JobRecord]:
            seen.append(list(consumed))
            given.append(dict(instances))
            return resumes

        wanted = [("approved", "order-1"), ("paid", "o-9"), ("approved", "order-1")]
        wanted += [("approved", "order-1"), ("nobody", "x")]
        consumed = store.workflows.consume_bookmarks(wanted, enqueue)

        assert consumed == [older, other, newer, None, None]
        assert seen == [consumed]
        assert given == [{instance.id: instance}]
        for job in resumes:
            assert state_of(store, job.id) is JobState.ENQUEUED
        assert _consume(store, "approved", "order-1") is None
        assert store.workflows.consume_bookmarks([]) == []

    def test_consume_bookmarks_consumes_nothing_when_its_jobs_cannot_be_stored(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """If the jobs built for the consumed bookmarks cannot be stored, none of the
        bookmarks is consumed."""
        instance = create_instance(store, clock)
        bookmarks = [make_bookmark(clock, instance.id, correlation_id=f"o-{n}") for n in range(2)]
        for bookmark in bookmarks:
            store.workflows.add_bookmark(bookmark)
        orphan = make_job(clock, state=JobState.AWAITING, parent_id=new_id(clock))
        wanted = [("approved", "o-0"), ("approved", "o-1")]
        with pytest.raises(ParentJobNotFound):
            store.workflows.consume_bookmarks(wanted, lambda consumed, instances: [orphan])
        assert store.workflows.consume_bookmarks(wanted) == bookmarks

    def test_concurrent_batch_consumers_take_each_bookmark_at_most_once(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Racers consuming overlapping batches of signals take every bookmark exactly
        once between them."""
        racers = self.contention.racers
        instance = create_instance(store, clock)
        for round_number in range(self.contention.rounds):
            keys = [("approved", f"r{round_number}-{n}") for n in range(4)]
            for name, correlation in keys:
                store.workflows.add_bookmark(
                    make_bookmark(clock, instance.id, signal_name=name, correlation_id=correlation)
                )
            batches = [keys[n % 4 :] + keys[: n % 4] for n in range(racers)]
            results = race(
                store, [partial(store.workflows.consume_bookmarks, batch) for batch in batches]
            )
            taken = [b.id for result in results for b in result if b is not None]
            assert len(taken) == len(set(taken)) == len(keys), results

    def test_create_instance_with_jobs_commits_the_instance_and_its_first_jobs_together(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """create_instance with jobs commits the instance and its first jobs together."""
        instance = make_instance(clock, revision=5)
        first = make_job(clock, workflow_instance_id=instance.id, activity_node_id="start")
        side = make_job(
            clock, queue="audit", workflow_instance_id=instance.id, activity_node_id="audit"
        )
        store.workflows.create_instance(instance, enqueue=[first, side])
        assert store.workflows.get_instance(instance.id) == with_fields(instance, revision=1)
        for job in (first, side):
            assert store.jobs.get_job(job.id) == job

    def test_create_instances_stores_every_instance_with_its_jobs_and_waits_at_once(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """``create_instances`` stores each instance at revision 1 with its first jobs
        and its first waits, as ``create_instance`` would store each of them."""
        instances = [make_instance(clock, data={"n": n}, revision=3) for n in range(3)]
        starts = [
            NewInstance(
                instance=instance,
                enqueue=(make_job(clock, workflow_instance_id=instance.id),),
                bookmarks=(make_bookmark(clock, instance.id, correlation_id=f"c-{n}"),),
            )
            for n, instance in enumerate(instances)
        ]
        store.workflows.create_instances(starts)
        for n, start in enumerate(starts):
            stored = store.workflows.get_instance(start.instance.id)
            assert stored == with_fields(start.instance, revision=1)
            assert store.jobs.get_job(start.enqueue[0].id) == start.enqueue[0]
            assert _consume(store, "approved", f"c-{n}") == start.bookmarks[0]
        store.workflows.create_instances([])

    def test_create_instances_with_one_duplicate_stores_none_of_them(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """A batch naming an instance already stored raises ``ConcurrencyConflict`` and
        stores none of its instances, jobs or waits."""
        original = create_instance(store, clock, data={"who": "first"})
        fresh = make_instance(clock)
        job = make_job(clock, workflow_instance_id=fresh.id)
        bookmark = make_bookmark(clock, fresh.id)
        starts = [
            NewInstance(instance=fresh, enqueue=(job,), bookmarks=(bookmark,)),
            NewInstance(instance=with_fields(original, data={"who": "second"})),
        ]
        with pytest.raises(ConcurrencyConflict):
            store.workflows.create_instances(starts)
        assert store.workflows.get_instance(fresh.id) is None
        assert store.jobs.get_job(job.id) is None
        assert _consume(store, "approved", "order-1") is None
        assert store.workflows.get_instance(original.id) == original

    def test_a_duplicate_instance_create_stores_none_of_its_jobs(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """A duplicate instance create stores none of its jobs."""
        original = create_instance(store, clock, data={"who": "first"})
        job = make_job(clock, workflow_instance_id=original.id, activity_node_id="start")
        duplicate = with_fields(original, data={"who": "second"})
        with pytest.raises(ConcurrencyConflict):
            store.workflows.create_instance(duplicate, enqueue=[job])
        assert store.jobs.get_job(job.id) is None
        assert store.workflows.get_instance(original.id) == original

    def test_an_instance_whose_first_job_cannot_be_stored_is_not_created(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """An instance whose first job cannot be stored is not created."""
        instance = make_instance(clock)
        valid = make_job(clock, workflow_instance_id=instance.id, activity_node_id="start")
        orphan = make_job(
            clock,
            state=JobState.AWAITING,
            parent_id=new_id(clock),
            workflow_instance_id=instance.id,
            activity_node_id="then",
        )
        with pytest.raises(ParentJobNotFound):
            store.workflows.create_instance(instance, enqueue=[valid, orphan])
        assert store.workflows.get_instance(instance.id) is None
        assert store.jobs.get_job(valid.id) is None
        assert store.jobs.get_job(orphan.id) is None
        store.workflows.create_instance(instance, enqueue=[valid])
        assert store.workflows.get_instance(instance.id) is not None

    def test_consume_bookmark_enqueues_the_resume_jobs_in_the_same_atom(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """consume_bookmark enqueues the resume jobs in the same atom."""
        instance = create_instance(store, clock)
        bookmark = make_bookmark(clock, instance.id, payload_type="shop.Approval")
        store.workflows.add_bookmark(bookmark)
        seen: list[BookmarkRecord] = []
        resume = make_job(clock, workflow_instance_id=instance.id, activity_node_id="resume")

        def build(consumed: BookmarkRecord) -> Sequence[JobRecord]:
            seen.append(consumed)
            return [resume]

        assert _consume(store, "approved", "order-1", build) == bookmark
        assert seen == [bookmark]
        assert store.jobs.get_job(resume.id) == resume
        assert _consume(store, "approved", "order-1", build) is None
        assert seen == [bookmark], "the callback runs only for a consumed bookmark"

    def test_a_resume_job_that_cannot_be_stored_leaves_the_bookmark_in_place(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """A resume job that cannot be stored leaves the bookmark in place."""
        instance = create_instance(store, clock)
        bookmark = make_bookmark(clock, instance.id)
        store.workflows.add_bookmark(bookmark)
        orphan = make_job(
            clock,
            state=JobState.AWAITING,
            parent_id=new_id(clock),
            workflow_instance_id=instance.id,
            activity_node_id="resume",
        )
        with pytest.raises(ParentJobNotFound):
            _consume(store, "approved", "order-1", _resume_with([orphan]))
        assert store.jobs.get_job(orphan.id) is None
        resume = make_job(clock, workflow_instance_id=instance.id, activity_node_id="resume")
        assert _consume(store, "approved", "order-1", _resume_with([resume])) == bookmark
        assert state_of(store, resume.id) is JobState.ENQUEUED

    def test_concurrent_consumers_with_enqueue_callbacks_store_exactly_one_resume_job(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Concurrent consumers with enqueue callbacks store exactly one resume job."""
        racers = self.contention.racers
        instance = create_instance(store, clock)
        for round_number in range(self.contention.rounds):
            correlation = f"order-{round_number}"
            bookmark = make_bookmark(clock, instance.id, correlation_id=correlation)
            store.workflows.add_bookmark(bookmark)
            jobs = [
                make_job(clock, workflow_instance_id=instance.id, activity_node_id="resume")
                for _ in range(racers)
            ]
            consumers = [
                partial(_consume, store, "approved", correlation, _resume_with([job]))
                for job in jobs
            ]
            results = race(store, consumers)
            winners = [n for n, result in enumerate(results) if result is not None]
            assert len(winners) == 1, f"consumers that got the bookmark: {winners}"
            assert results[winners[0]] == bookmark
            stored = [job.id for job in jobs if store.jobs.get_job(job.id) is not None]
            assert stored == [jobs[winners[0]].id]

    def test_create_instance_with_bookmarks_stores_its_first_waits_in_the_same_atom(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """create_instance with bookmarks stores its first waits in the same atom."""
        instance = make_instance(clock, state=InstanceState.SUSPENDED)
        wait = make_bookmark(clock, instance.id, correlation_id="first-wait")
        timer = make_job(clock, state=JobState.SCHEDULED, due_at=clock.now() + timedelta(minutes=5))
        store.workflows.create_instance(instance, enqueue=[timer], bookmarks=[wait])
        assert stored_instance(store, instance.id) == instance
        assert state_of(store, timer.id) is JobState.SCHEDULED
        assert _consume(store, "approved", "first-wait") == wait

    def test_an_instance_whose_first_wait_cannot_be_stored_is_not_created(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """An instance whose first wait cannot be stored is not created (nor its jobs)."""
        other = create_instance(store, clock)
        taken = make_bookmark(clock, other.id)
        store.workflows.add_bookmark(taken)
        instance = make_instance(clock)
        job = make_job(clock, workflow_instance_id=instance.id, activity_node_id="start")
        clash = with_fields(taken, instance_id=instance.id)
        with pytest.raises(StorageError):
            store.workflows.create_instance(instance, enqueue=[job], bookmarks=[clash])
        assert store.workflows.get_instance(instance.id) is None
        assert store.jobs.get_job(job.id) is None
        duplicate = with_fields(other, data={"again": True})
        fresh = make_bookmark(clock, other.id, correlation_id="never-stored")
        with pytest.raises(ConcurrencyConflict):
            store.workflows.create_instance(duplicate, bookmarks=[fresh])
        assert _consume(store, "approved", "never-stored") is None

    def test_consume_bookmark_by_id_deletes_and_returns_that_bookmark_once(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """consume_bookmark_by_id deletes and returns that bookmark once, whatever its age."""
        instance = create_instance(store, clock)
        older = make_bookmark(clock, instance.id)
        clock.advance(timedelta(seconds=1))
        newer = make_bookmark(clock, instance.id)
        store.workflows.add_bookmark(older)
        store.workflows.add_bookmark(newer)
        assert store.workflows.consume_bookmark_by_id(newer.id) == newer
        assert store.workflows.consume_bookmark_by_id(newer.id) is None
        assert store.workflows.consume_bookmark_by_id(new_id(clock)) is None
        assert _consume(store, "approved", "order-1") == older
        assert _consume(store, "approved", "order-1") is None

    def test_consume_bookmark_by_id_enqueues_its_jobs_in_the_same_atom(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """consume_bookmark_by_id enqueues its jobs in the same atom, or consumes nothing."""
        instance = create_instance(store, clock)
        bookmark = make_bookmark(clock, instance.id)
        store.workflows.add_bookmark(bookmark)
        orphan = make_job(clock, state=JobState.AWAITING, parent_id=new_id(clock))
        with pytest.raises(ParentJobNotFound):
            store.workflows.consume_bookmark_by_id(bookmark.id, _resume_with([orphan]))
        resume = make_job(clock, workflow_instance_id=instance.id, activity_node_id="timeout")
        seen: list[BookmarkRecord] = []

        def build(consumed: BookmarkRecord) -> Sequence[JobRecord]:
            seen.append(consumed)
            return [resume]

        assert store.workflows.consume_bookmark_by_id(bookmark.id, build) == bookmark
        assert seen == [bookmark]
        assert state_of(store, resume.id) is JobState.ENQUEUED
        assert store.jobs.get_job(orphan.id) is None

    def test_a_bookmark_raced_by_id_and_by_signal_is_consumed_exactly_once(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """A bookmark raced by id and by signal is consumed exactly once (a timeout racing
        its signal)."""
        racers = self.contention.racers
        instance = create_instance(store, clock)
        for round_number in range(self.contention.rounds):
            correlation = f"race-{round_number}"
            bookmark = make_bookmark(clock, instance.id, correlation_id=correlation)
            store.workflows.add_bookmark(bookmark)
            jobs = [make_job(clock) for _ in range(racers)]
            actions: list[Callable[[], BookmarkRecord | None]] = []
            for n, job in enumerate(jobs):
                if n % 2:
                    actions.append(
                        partial(
                            store.workflows.consume_bookmark_by_id, bookmark.id, _resume_with([job])
                        )
                    )
                else:
                    actions.append(
                        partial(_consume, store, "approved", correlation, _resume_with([job]))
                    )
            results = race(store, actions)
            assert [r for r in results if r is not None] == [bookmark]
            stored = [job.id for job in jobs if store.jobs.get_job(job.id) is not None]
            assert len(stored) == 1

    def test_cancel_instance_cancels_the_instance_its_jobs_and_its_bookmarks(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """cancel_instance cancels the instance, its jobs and its bookmarks in one atom."""
        instance = create_instance(store, clock, data={"kept": True}, cursor={"at": "b"})
        other = create_instance(store, clock)
        mine = {"workflow_instance_id": instance.id, "activity_node_id": "n"}
        pending = {
            state: job_in_state(store, clock, state, **mine)
            for state in (JobState.SCHEDULED, JobState.ENQUEUED, JobState.FAILED)
        }
        running = job_in_state(store, clock, JobState.PROCESSING, **mine)
        finished = job_in_state(store, clock, JobState.SUCCEEDED, **mine)
        parent = job_in_state(store, clock, JobState.ENQUEUED, **mine)
        (child,) = store.jobs.enqueue([make_job(clock, state=JobState.AWAITING, parent_id=parent)])
        theirs = job_in_state(
            store, clock, JobState.ENQUEUED, workflow_instance_id=other.id, activity_node_id="n"
        )
        store.workflows.add_bookmark(make_bookmark(clock, instance.id))
        store.workflows.add_bookmark(make_bookmark(clock, instance.id, correlation_id="two"))
        kept = make_bookmark(clock, other.id, correlation_id="theirs")
        store.workflows.add_bookmark(kept)
        clock.advance(timedelta(seconds=3))

        assert store.workflows.cancel_instance(instance.id) is True
        assert stored_instance(store, instance.id) == with_fields(
            instance, state=InstanceState.CANCELLED, revision=2, updated_at=clock.now()
        )
        for job_id in [*pending.values(), parent, child]:
            cancelled = stored_job(store, job_id)
            assert cancelled.state is JobState.CANCELLED, cancelled
            assert cancelled.finished_at == clock.now()
        assert stored_job(store, running).state is JobState.PROCESSING
        assert stored_job(store, running).cancel_requested
        assert state_of(store, finished) is JobState.SUCCEEDED
        assert state_of(store, theirs) is JobState.ENQUEUED
        assert _consume(store, "approved", "order-1") is None
        assert _consume(store, "approved", "two") is None
        assert _consume(store, "approved", "theirs") == kept
        assert stored_instance(store, other.id) == other

    @pytest.mark.parametrize(
        "state",
        [InstanceState.COMPLETED, InstanceState.FAILED, InstanceState.COMPENSATED],
    )
    def test_cancel_instance_of_a_finished_instance_changes_nothing(
        self, store: StoreUnderTest, clock: FakeClock, state: InstanceState
    ) -> None:
        """cancel_instance of a finished (or unknown) instance returns false and changes
        nothing."""
        instance = create_instance(store, clock, state=state)
        job = job_in_state(
            store, clock, JobState.ENQUEUED, workflow_instance_id=instance.id, activity_node_id="n"
        )
        bookmark = make_bookmark(clock, instance.id)
        store.workflows.add_bookmark(bookmark)
        assert store.workflows.cancel_instance(instance.id) is False
        assert store.workflows.cancel_instance(new_id(clock)) is False
        assert stored_instance(store, instance.id) == instance
        assert state_of(store, job) is JobState.ENQUEUED
        assert _consume(store, "approved", "order-1") == bookmark
        assert store.workflows.cancel_instance(
            create_instance(store, clock, state=InstanceState.SUSPENDED).id
        )
        cancelled = create_instance(store, clock)
        assert store.workflows.cancel_instance(cancelled.id)
        assert store.workflows.cancel_instance(cancelled.id) is False

    def test_a_checkpoint_after_a_cancel_fails_its_revision_check(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """A checkpoint after a cancel fails its revision check and inserts nothing."""
        instance = create_instance(store, clock)
        step = job_in_state(
            store,
            clock,
            JobState.PROCESSING,
            workflow_instance_id=instance.id,
            activity_node_id="n",
        )
        claimed = stored_job(store, step)
        follower = make_job(clock, workflow_instance_id=instance.id, activity_node_id="next")
        assert store.workflows.cancel_instance(instance.id)
        checkpoint = WorkflowCheckpoint(
            instance=with_fields(instance, data={"step": 2}), expected_revision=1
        )
        with pytest.raises(ConcurrencyConflict):
            store.jobs.apply(succeed(claimed, clock, checkpoint=checkpoint, enqueue=[follower]))
        assert store.jobs.get_job(follower.id) is None
        assert stored_instance(store, instance.id).state is InstanceState.CANCELLED
        assert store.jobs.apply(succeed(claimed, clock)) is True  # the plain success still lands

    def test_a_cancel_racing_checkpoints_leaves_no_job_of_the_instance_pending(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """A cancel racing a checkpoint leaves no job of the instance pending: the
        checkpoint either conflicts, or commits first and its new jobs are cancelled."""
        for _ in range(self.contention.rounds):
            instance = create_instance(store, clock)
            step = job_in_state(
                store,
                clock,
                JobState.PROCESSING,
                workflow_instance_id=instance.id,
                activity_node_id="n",
            )
            claimed = stored_job(store, step)
            follower = make_job(clock, workflow_instance_id=instance.id, activity_node_id="next")
            checkpoint = WorkflowCheckpoint(
                instance=with_fields(instance, data={"step": 2}), expected_revision=1
            )

            racers: list[Callable[[], bool | str]] = [
                partial(
                    _checkpoint_or_conflict,
                    store,
                    succeed(claimed, clock, checkpoint=checkpoint, enqueue=[follower]),
                ),
                partial(store.workflows.cancel_instance, instance.id),
            ]
            checkpointed, cancelled = race(store, racers)
            assert cancelled is True
            assert stored_instance(store, instance.id).state is InstanceState.CANCELLED
            follower_stored = store.jobs.get_job(follower.id)
            if checkpointed is True:
                assert follower_stored is not None
                assert follower_stored.state is JobState.CANCELLED
            else:
                assert checkpointed == "conflict"
                assert follower_stored is None
                assert stored_job(store, step).cancel_requested
