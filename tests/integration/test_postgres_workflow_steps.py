"""Workflow steps acknowledged together on PostgreSQL: a batch of steps costs the same
few round trips however many steps it holds (each step's checkpoint still set on its
own revision), as a batch of plain successes does.

Configured by MILLRACE_TEST_POSTGRES_URL (``scripts/testdb.sh`` starts a throwaway server);
skipped when unset, except in CI, where it fails.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from millrace_django.clock import FakeClock
from millrace_django.conformance.support import (
    claim_new,
    create_instance,
    make_job,
    stored_instance,
    succeed,
    with_fields,
)
from millrace_django.contract import JobState, WorkflowCheckpoint
from tests.conformance.django_harness import DjangoStoreUnderTest, require_alias
from tests.integration.notifications import store_on
from tests.integration.wire import wire_messages

ALIAS = "postgres"
require_alias(ALIAS, "MILLRACE_TEST_POSTGRES_URL")
pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True, databases=[ALIAS])]


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store(clock: FakeClock) -> Iterator[DjangoStoreUnderTest]:
    with store_on(ALIAS, clock) as store:
        yield store


def _round_trips_acknowledging(store: DjangoStoreUnderTest, clock: FakeClock, steps: int) -> int:
    """Messages sent to acknowledge ``steps`` steps of as many instances, each with its
    checkpoint and its next job."""
    transitions = []
    for n in range(steps):
        instance = create_instance(store, clock, data={"n": n})
        job = claim_new(store, clock, f"flows-{steps}", workflow_instance_id=instance.id)
        moved = with_fields(instance, data={"n": n, "done": True}, updated_at=clock.now())
        transitions.append(
            succeed(
                job,
                clock,
                enqueue=[make_job(clock, queue="next", workflow_instance_id=instance.id)],
                checkpoint=WorkflowCheckpoint(instance=moved, expected_revision=1),
            )
        )
    with wire_messages(ALIAS) as sent:
        assert store.jobs.apply_many(transitions) == [True] * steps
    for t in transitions:
        assert t.checkpoint is not None
        assert stored_instance(store, t.checkpoint.instance.id).revision == 2
        assert store.jobs.get_job(t.enqueue[0].id) is not None
        job = store.jobs.get_job(t.job_id)
        assert job is not None and job.state is JobState.SUCCEEDED
    return len(sent)


def test_a_batch_of_workflow_steps_costs_the_same_round_trips_however_many_steps(
    store: DjangoStoreUnderTest, clock: FakeClock
) -> None:
    _round_trips_acknowledging(store, clock, 1)  # the session's statements are prepared

    few = _round_trips_acknowledging(store, clock, 4)
    many = _round_trips_acknowledging(store, clock, 40)

    # BEGIN; the savepoint a refused step would roll back to; the fences and
    # checkpoints; the successes and the next jobs; its release; the counts; COMMIT.
    assert many == few, (few, many)
    assert few <= 7, few
