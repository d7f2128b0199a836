"""Job tags: stored with the job, read back, and the job list's tag filter."""

from __future__ import annotations

from datetime import timedelta
from typing import ClassVar

from millrace_django.clock import FakeClock
from millrace_django.conformance.harness import StoreUnderTest
from millrace_django.conformance.suite import FactGroup
from millrace_django.conformance.support import (
    enqueue,
    ids_of,
    job_in_state,
    make_job,
    walk_pages,
)
from millrace_django.contract import JobQuery, JobState, TenantFilter


class TagFacts(FactGroup):
    heading: ClassVar[str] = "Tags"

    def test_a_jobs_tags_are_read_back_by_get_job_and_the_details(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """get_job and the job details give a job's tags, sorted; an untagged job none."""
        tagged = enqueue(store, clock, tags=("billing", "eu"))
        plain = enqueue(store, clock)

        record = store.jobs.get_job(tagged)
        details = store.monitoring.get_job_details(tagged)
        untagged = store.jobs.get_job(plain)
        assert record is not None and details is not None and untagged is not None
        assert record.tags == ("billing", "eu")
        assert details.tags == ("billing", "eu")
        assert untagged.tags == ()

    def test_the_tag_filter_lists_only_the_jobs_carrying_the_tag_in_every_state(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """The tag filter lists the tag's jobs in every state, newest first, and no other."""
        expected = []
        for state in (JobState.ENQUEUED, JobState.SUCCEEDED, JobState.DEAD, JobState.FAILED):
            clock.advance(timedelta(seconds=1))
            expected.append(job_in_state(store, clock, state, tags=("report",)))
            clock.advance(timedelta(seconds=1))
            job_in_state(store, clock, state, tags=("other",))
            job_in_state(store, clock, state)

        page = store.monitoring.query_jobs(JobQuery(tag="report"))
        assert ids_of(page) == list(reversed(expected))

    def test_the_tag_filter_combines_with_the_state_filter_and_pages(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """With a state filter too, paging walks every matching job exactly once."""
        wanted = []
        for n in range(5):
            clock.advance(timedelta(seconds=1))
            wanted.append(job_in_state(store, clock, JobState.SUCCEEDED, tags=("nightly",)))
            job_in_state(store, clock, JobState.DEAD, tags=("nightly",))
            job_in_state(store, clock, JobState.SUCCEEDED, tags=(f"other-{n}",))

        query = JobQuery(tag="nightly", states=frozenset({JobState.SUCCEEDED}), limit=2)
        pages = walk_pages(store.monitoring.query_jobs, query)
        seen = [job_id for page in pages for job_id in page]
        assert seen == list(reversed(wanted))

    def test_a_tag_filter_matching_no_job_gives_an_empty_page(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """A tag no job carries gives an empty page without a cursor."""
        enqueue(store, clock, tags=("a",))
        page = store.monitoring.query_jobs(JobQuery(tag="b", tenant=TenantFilter.any()))
        assert page.items == [] and page.next_cursor is None

    def test_tags_are_stored_with_every_job_of_a_batch(
        self, store: StoreUnderTest, clock: FakeClock
    ) -> None:
        """Each job of one enqueue batch is stored with its own tags."""
        jobs = [make_job(clock, tags=(f"t{n % 3}",)) for n in range(9)]
        store.jobs.enqueue(jobs)

        for n in range(3):
            page = store.monitoring.query_jobs(JobQuery(tag=f"t{n}"))
            assert sorted(ids_of(page)) == sorted(job.id for job in jobs if job.tags == (f"t{n}",))
