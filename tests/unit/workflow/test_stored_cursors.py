"""Cursors stored before the cursor had records (written by the engine at 442b99a): each
reads into :mod:`~millrace_django.engine.workflow.instance_cursor`'s records and writes
back byte for byte, and an instance stored mid-saga goes on from where it was, on memory,
SQLite and PostgreSQL (when configured).

``stored_cursors.jsonl`` holds one cursor a line, as ``json.dumps`` wrote it: every job
kind, joins, open, compensating and closed sagas (nested or not), waits with and without
a timer, failures awaiting an operator, a failed instance whose definition is gone, a
finished one, and a start with every retry and limit field (the long tracebacks of the
errors cut to their last line)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from uuid import UUID

import pytest
from django.conf import settings as django_settings

from millrace_django.clock import FakeClock
from millrace_django.contract import (
    InstanceState,
    Invocation,
    JobRecord,
    JobState,
    WorkflowInstanceRecord,
)
from millrace_django.engine import EngineSettings, Retry
from millrace_django.engine.workflow import targets
from millrace_django.engine.workflow.instance_cursor import Cursor
from millrace_django.storage.memory import MemoryStorage
from millrace_django.storage.orm import DjangoStorage
from millrace_django.testing import JobRunner
from tests.unit.workflow import flows

STORED = (Path(__file__).parent / "stored_cursors.jsonl").read_text().splitlines()

SERVERS = [alias for alias in ("postgres",) if alias in django_settings.DATABASES]


@pytest.mark.parametrize("stored", STORED)
def test_a_stored_cursor_reads_and_writes_back_byte_for_byte(stored: str) -> None:
    assert json.dumps(Cursor.from_json(json.loads(stored)).to_json()) == stored


# flows.TRIP with its saga half done: book_hotel and book_flight on the undo stack, the
# charge_card step pending (the data says it will fail).
INSTANCE = UUID("019b76da-a800-70a5-a06d-5835ebf52cdb")
PENDING = UUID("019b76da-a800-70a9-9c98-f3fda22c2893")
AT = datetime(2026, 1, 1, tzinfo=UTC)
MID_SAGA = (
    '{"module": "tests.unit.workflow.flows", "queue": "default", "retry": {"kind": "none", '
    '"max_attempts": 1, "base_delay_us": 0, "max_delay_us": 0, "jitter": false}, "seq": 1, '
    '"frames": {"saga1#1": {"kind": "saga", "node": "saga1", "parent": null, "loop": null, '
    '"seq": 1, "completed": [["a2", null], ["a3", null]], "state": "open", "nested": null}}, '
    '"jobs": {"019b76da-a800-70a9-9c98-f3fda22c2893": {"kind": "step", "node": "a4", '
    '"scope": "saga1#1", "loop": null}}, "waits": {}, "stuck": {}, "done": ["a1", "a2", '
    '"a3"], "error": null}'
)


@pytest.mark.django_db(transaction=True, databases=["default", *SERVERS])
@pytest.mark.parametrize(
    "where",
    [
        "memory",
        "default",
        *(pytest.param(alias, marks=getattr(pytest.mark, alias)) for alias in SERVERS),
    ],
)
def test_an_instance_stored_mid_saga_goes_on_from_where_it_was(where: str) -> None:
    clock = FakeClock(AT)
    storage = MemoryStorage(clock) if where == "memory" else DjangoStorage(where, clock)
    config = EngineSettings(queues=frozenset({"default"}), default_retry=Retry.none())
    runner = JobRunner(storage, clock, config)
    instance = WorkflowInstanceRecord(
        id=INSTANCE,
        definition_id="t-trip",
        definition_version=1,
        state=InstanceState.RUNNING,
        data={
            "order": 7,
            "fail": {"charge_card": "always"},
            "book_hotel": True,
            "book_flight": True,
        },
        created_at=AT,
        updated_at=AT,
        cursor=json.loads(MID_SAGA),
    )
    pending = JobRecord(
        id=PENDING,
        queue="default",
        invocation=Invocation(target=targets.RUN, args=(str(INSTANCE), "a4")),
        state=JobState.ENQUEUED,
        created_at=AT,
        workflow_instance_id=INSTANCE,
        activity_node_id="a4",
    )
    runner.workflows.storage.create_instance(instance, enqueue=[pending])
    stored = runner.workflows.storage.get_instance(INSTANCE)
    assert stored is not None and isinstance(stored.cursor, dict)
    assert Cursor.from_json(stored.cursor).to_json() == json.loads(MID_SAGA)

    runner.run_until_idle(throw_on_failure=False)

    assert flows.calls == ["charge_card", "cancel_flight", "cancel_hotel"]
    runner.assert_instance(INSTANCE, InstanceState.COMPENSATED)
