"""The PostgreSQL hot path's own cases, beyond what the kit reaches: a batch large enough
to be copied in, the pre-lock that lets a batch acknowledgement wake continuations
inserted concurrently, single statements run in autocommit (bounded, leaving no
setting behind), and workflow steps acknowledged in a few round trips per batch.

Configured by MILLRACE_TEST_POSTGRES_URL (``scripts/testdb.sh`` starts a throwaway server);
skipped when unset, except in CI, where it fails.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from functools import partial
from typing import Any
from uuid import uuid4

import pytest
from django.db import DatabaseError, connections, transaction
from django.test.utils import CaptureQueriesContext

from millrace_django.clock import FakeClock
from millrace_django.conformance.support import (
    claim,
    claim_new,
    create_instance,
    make_job,
    make_recurring,
    race,
    stored_instance,
    succeed,
    with_fields,
)
from millrace_django.contract import (
    ClaimRequest,
    FireOutcome,
    Invocation,
    JobQuery,
    JobRecord,
    JobState,
    JobTransition,
    WorkflowCheckpoint,
)
from millrace_django.engine.retry import Retry
from millrace_django.errors import DuplicateJobId
from millrace_django.ids import new_id
from millrace_django.models import Job
from millrace_django.storage.orm import DjangoStorage
from millrace_django.storage.orm.postgresql.hotpath import COPY_AT_LEAST
from millrace_django.storage.orm.postgresql.parameters import (
    complete_parameters,
    timestamp_text,
)
from millrace_django.storage.orm.postgresql.statements import (
    CLAIM_ONE_QUEUE,
    COMPLETE,
    PROBE_BY_INDEX,
)
from millrace_django.storage.orm.transactions import Transactions
from millrace_django.storage.orm.vendors import vendor_for
from millrace_django.storage.orm.vendors.postgresql import PostgreSQL
from tests.conformance.django_harness import DjangoStoreUnderTest, require_alias
from tests.integration.notifications import HINT_SECONDS, store_on
from tests.integration.wire import wire_messages

ALIAS = "postgres"
require_alias(ALIAS, "MILLRACE_TEST_POSTGRES_URL")
pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True, databases=[ALIAS])]

LARGE = COPY_AT_LEAST + 7
AWKWARD = (
    "tab\there, line\nbreak, return\r, back\\slash \\N \\t, quote\" ' and \u00fc\u20ac\U0001f600"
)
"""Text COPY must escape (and text it must not take for an escape or a NULL)."""


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


def _stored() -> int:
    return Job.objects.using(ALIAS).count()


def test_a_large_batch_is_stored_in_batch_order_and_announced(
    storage: DjangoStorage, clock: FakeClock
) -> None:
    rich = make_job(
        clock,
        queue="bulk",
        timeout=timedelta(days=1, seconds=90, microseconds=5),
        trace_parent="00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        recurring_id="nightly",
        requeued_from=uuid4(),
        workflow_instance_id=uuid4(),
        activity_node_id="node",
        last_error="before",
        progress={"done": 1, "of": [2, "three"]},
        result={"kept": None},
    )
    batch = [rich]
    batch += [make_job(clock, queue="bulk") for _ in range(LARGE - 2)]
    batch.append(make_job(clock, queue="later", state=JobState.SCHEDULED, due_at=clock.now()))
    listener = storage.listen({"bulk"})
    try:
        assert storage.enqueue(batch) == [job.id for job in batch]
        assert listener.wait(HINT_SECONDS)
    finally:
        listener.close()

    assert storage.get_job(batch[0].id) == batch[0]
    assert storage.get_job(batch[-1].id) == batch[-1]
    claimed = storage.claim(
        claim_request("w1", ["bulk"], LARGE),
    )
    assert [job.id for job in claimed] == [job.id for job in batch[:-1]]


def test_a_large_batch_keeps_text_that_copy_must_escape_exactly(
    storage: DjangoStorage, clock: FakeClock
) -> None:
    awkward = AWKWARD
    odd = make_job(
        clock,
        queue="odd\tqueue",
        invocation=Invocation(
            target="pkg.mod:fn", args=[awkward, ["\\"], 1.5, 10**20], kwargs={awkward: None}
        ),
        state=JobState.SCHEDULED,
        due_at=clock.now() + timedelta(hours=1),
        tenant_id="\\N",
        last_error=awkward,
        activity_node_id="\\",
        result=awkward,
        progress={awkward: [awkward]},
        checkpoint={awkward: awkward},
    )
    batch = [odd, *(make_job(clock) for _ in range(LARGE - 1))]
    assert storage.enqueue(batch) == [job.id for job in batch]
    assert storage.get_job(odd.id) == odd
    assert storage.get_job(batch[1].id) == batch[1]


def test_a_copied_batch_stores_every_column_as_a_small_batch_does(
    storage: DjangoStorage, clock: FakeClock
) -> None:
    odd = _odd_jobs(clock)
    plain = [make_job(clock) for _ in range(COPY_AT_LEAST)]
    # The odd jobs among plain ones, two of them in a row: each row's shared columns differ
    # from the previous row's, or equal them.
    batch = [plain[0], odd[0], *plain[1:100], *odd[1:3], *plain[100:300], *odd[3:], *plain[300:]]
    with wire_messages() as sent:
        storage.enqueue(batch)
    assert any(text.startswith("COPY ") for text in sent), sent
    copied = _stored_columns()
    Job.objects.using(ALIAS).all().delete()

    small = [*odd, *plain[:2]]
    with wire_messages() as sent:
        storage.enqueue(small)
    assert not any(text.startswith("COPY ") for text in sent), sent
    inserted = _stored_columns()

    assert len(inserted) == len(small)
    assert {job_id: copied[job_id] for job_id in inserted} == inserted


@pytest.mark.parametrize(
    "instant",
    [
        datetime(2026, 1, 1, tzinfo=UTC),
        datetime(2026, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC),
        datetime(1999, 6, 1, 12, 0, 0, 1, tzinfo=timezone(timedelta(hours=-3, minutes=-30))),
    ],
)
def test_an_instant_reads_back_from_its_timestamp_text_exactly(instant: datetime) -> None:
    text = timestamp_text(instant)
    assert text.endswith("Z") == (instant.tzinfo is UTC)
    with connections[ALIAS].cursor() as cursor:
        cursor.execute("SELECT %s::timestamptz", [text])
        assert cursor.fetchone()[0] == instant


def _odd_jobs(clock: FakeClock) -> list[JobRecord]:
    """Jobs whose every column holds a value COPY's text format could get wrong (but an
    idempotency key: a batch claiming a scope is not copied)."""
    text = AWKWARD
    now = clock.now()
    arguments = Invocation(
        target="pkg.mod:fn\t\\",
        args=[text, ["\\", {"k\\": "v\n\\n"}], 1.5, 10**20, None, True, -0.0],
        kwargs={text: {"nested": ["\\\\", "\\u0041", text]}},
    )
    rich = make_job(
        clock,
        queue="odd\tqueue\\",
        invocation=arguments,
        created_at=now + timedelta(microseconds=1),
        priority=2**31 - 1,
        retry=Retry.fixed(timedelta(microseconds=1), 3),
        timeout=timedelta(days=3, seconds=7, microseconds=1),
        tenant_id=text,
        parent_id=uuid4(),
        requeued_from=uuid4(),
        trace_parent="00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        recurring_id=text,
        last_error=text,
        result=text,
        progress={text: [text, {"\\": None}]},
        checkpoint=[text, {"\\\t": text}],
        workflow_instance_id=uuid4(),
        activity_node_id="\\",
    )
    other_tenant = replace(rich, id=new_id(clock), tenant_id="\\N")
    scheduled = make_job(
        clock,
        queue="other",
        state=JobState.SCHEDULED,
        priority=-7,
        due_at=now + timedelta(hours=1, microseconds=3),
        created_at=(now + timedelta(microseconds=654_321)).astimezone(
            timezone(timedelta(hours=5, minutes=30))
        ),
        retry=Retry.exponential(4),
    )
    worn = make_job(
        clock,
        created_at=now + timedelta(seconds=1, microseconds=999_999),
        worker_id=text,
        lease_until=now + timedelta(seconds=30, microseconds=10),
        attempt=3,
        failures=2,
        cancel_requested=True,
        last_error="\r\n",
        finished_at=now + timedelta(microseconds=999_999),
        result={"a\tb": "\\"},
    )
    return [rich, other_tenant, scheduled, worn]


def _stored_columns() -> dict[str, tuple[str | None, ...]]:
    """Every stored job's columns but its sequence number, as PostgreSQL prints them, by
    uuid."""
    columns = ", ".join(f"{f.column}::text" for f in Job._meta.concrete_fields if not f.primary_key)
    with connections[ALIAS].cursor() as cursor:
        cursor.execute(f"SELECT {columns} FROM {Job._meta.db_table}")
        return {row[0]: row for row in cursor.fetchall()}


def test_a_stored_id_in_a_large_batch_raises_and_stores_nothing(
    storage: DjangoStorage, clock: FakeClock
) -> None:
    stored = make_job(clock)
    storage.enqueue([stored])
    batch = [make_job(clock) for _ in range(LARGE)]
    batch[LARGE // 2] = stored

    with pytest.raises(DuplicateJobId) as raised:
        storage.enqueue(batch)

    assert raised.value.job_id == stored.id
    assert _stored() == 1


def test_a_stored_id_in_a_small_batch_raises_and_stores_nothing(
    storage: DjangoStorage, clock: FakeClock
) -> None:
    stored = make_job(clock)
    storage.enqueue([stored])
    batch = [make_job(clock), stored, make_job(clock, idempotency_key="k")]

    with pytest.raises(DuplicateJobId) as raised:
        storage.enqueue(batch)

    assert raised.value.job_id == stored.id
    assert _stored() == 1


def test_a_large_batch_inside_a_callers_transaction_rolls_back_with_it(
    storage: DjangoStorage, clock: FakeClock
) -> None:
    batch = [make_job(clock) for _ in range(LARGE)]

    with pytest.raises(RuntimeError), transaction.atomic(using=ALIAS):
        storage.enqueue(batch)
        raise RuntimeError("the caller changed its mind")

    assert _stored() == 0


def test_held_keys_answer_their_holders_and_the_rest_is_inserted(
    storage: DjangoStorage, clock: FakeClock
) -> None:
    tenanted = make_job(clock, idempotency_key="k", tenant_id="t")
    untenanted = make_job(clock, idempotency_key="k")
    storage.enqueue([tenanted, untenanted])
    batch = [
        make_job(clock, idempotency_key="k", tenant_id="t"),
        make_job(clock),
        make_job(clock, idempotency_key="k"),
        make_job(clock, idempotency_key="k", tenant_id="other"),
    ]

    assert storage.enqueue(batch) == [tenanted.id, batch[1].id, untenanted.id, batch[3].id]
    assert _stored() == 4


def test_held_keys_are_found_by_their_scope_digest_where_the_storage_keeps_one(
    storage: DjangoStorage, clock: FakeClock
) -> None:
    """The look-up a server without NULLS NOT DISTINCT (before 15) gets, run here."""
    storage._jobs._ctx.__dict__["track_scope"] = True
    holder = make_job(clock, idempotency_key="k")
    assert storage.enqueue([holder]) == [holder.id]
    batch = [make_job(clock, idempotency_key="k"), make_job(clock, idempotency_key="k2")]

    assert storage.enqueue(batch) == [holder.id, batch[1].id]
    assert _stored() == 2


def test_acknowledgements_waking_continuations_race_awaiting_inserts_safely(
    store: DjangoStoreUnderTest, storage: DjangoStorage, clock: FakeClock
) -> None:
    """Children inserted while their parents' batch acknowledgement runs all end enqueued."""
    for round_no in range(4):
        parents = [claim_new(store, clock, "parents") for _ in range(3)]
        queue = f"children-{round_no}"
        children = [
            [
                make_job(clock, queue=queue, state=JobState.AWAITING, parent_id=parent.id)
                for parent in parents
            ]
            for _ in range(4)
        ]

        def insert(batch: list[JobRecord]) -> bool:
            for child in batch:
                assert storage.enqueue([child]) == [child.id]
            return True

        acknowledge = partial(
            storage.apply_many,
            [succeed(parent, clock, activate_continuations=True) for parent in parents],
        )
        actions: list[Callable[[], object]] = [partial(insert, batch) for batch in children]
        actions.insert(round_no % (len(children) + 1), acknowledge)

        race(store, actions)

        for batch in children:
            for child in batch:
                job = storage.get_job(child.id)
                assert job is not None and job.state is JobState.ENQUEUED, job
        assert len(claim(store, "w2", queues=[queue], max_count=100)) == 12


def test_a_batch_acknowledgement_keeps_odd_worker_ids_and_results_exactly(
    store: DjangoStoreUnderTest, storage: DjangoStorage, clock: FakeClock
) -> None:
    """The acknowledgement sends its arrays as literals it builds itself: quotes,
    backslashes, separators, braces and the word NULL survive, and each answer lands at
    its transition's position (a lost fence in the middle included)."""
    workers = ['w "1"', "w\\2", "w,3 {x}", "NULL", "wé 5", "w6"]
    results = ['say "hi"', "back\\slash", {"k": ['"', "\\", ",{}"]}, None, "NULL", 0]
    claimed = [claim_new(store, clock, "odd", worker=worker) for worker in workers]
    transitions = [
        succeed(job, clock, result=result) for job, result in zip(claimed, results, strict=True)
    ]
    stale = claimed[2]
    transitions[2] = replace(transitions[2], expected_worker_id=stale.worker_id + "-not")

    answers = storage.apply_many(transitions)

    assert answers == [True, True, False, True, True, True]
    for job, result, answer in zip(claimed, results, answers, strict=True):
        stored = storage.get_job(job.id)
        assert stored is not None
        if answer:
            assert (stored.state, stored.result) == (JobState.SUCCEEDED, result), stored
        else:
            assert (stored.state, stored.worker_id) == (JobState.PROCESSING, job.worker_id)


_SETTINGS = re.compile(r"^\s*(SET LOCAL [^;]*;\s*)*", re.IGNORECASE)
"""What the storage sends ahead of a read in the same message (its statement timeout)."""


_RE_READS = frozenset({"CTE Scan", "Subquery Scan"})


def _rows_read(plan: dict[str, Any]) -> int:
    """Rows the scans of ``plan`` (an ``EXPLAIN (ANALYZE, FORMAT JSON)`` node) read, every
    loop counted (scans of a CTE or a subquery re-read what the statement already holds:
    not counted)."""
    here = 0
    if "Scan" in plan["Node Type"] and plan["Node Type"] not in _RE_READS:
        rows = plan["Actual Rows"] + plan.get("Rows Removed by Filter", 0)
        here = rows * plan["Actual Loops"]
    return here + sum(_rows_read(child) for child in plan.get("Plans", ()))


def test_an_acknowledgement_reads_each_row_once_however_thin_the_statistics(
    store: DjangoStoreUnderTest, storage: DjangoStorage, clock: FakeClock
) -> None:
    """A plan made early (a young table, one just truncated, no statistics yet) and then
    reused: its work stays linear in the table and the batch, never the batch times the
    rows in flight."""
    storage.enqueue([make_job(clock, queue="thin") for _ in range(300)])
    in_flight = claim(store, "w1", queues=["thin"], max_count=250)
    batch = [succeed(job, clock) for job in in_flight[:50]]
    statement = COMPLETE
    connection = connections[ALIAS]
    with transaction.atomic(using=ALIAS), connection.cursor() as cursor:
        cursor.execute("SET LOCAL plan_cache_mode = force_generic_plan")
        cursor.execute(statement.prepare.replace(statement.name, "thin_plan", 1))
        cursor.execute(
            "EXPLAIN (ANALYZE, FORMAT JSON) "
            + statement.execute.replace(statement.name, "thin_plan"),
            complete_parameters(batch, clock.now()),
        )
        (plan,) = cursor.fetchone()
        cursor.execute("DEALLOCATE thin_plan")
        transaction.set_rollback(True, using=ALIAS)
    root = (json.loads(plan) if isinstance(plan, str) else plan)[0]["Plan"]
    assert root["Actual Rows"] == len(batch)  # every fence held
    assert _rows_read(root) <= 300 + 2 * len(batch), json.dumps(root, indent=1)


@pytest.mark.parametrize(
    "states",
    [frozenset(), frozenset({JobState.SUCCEEDED}), frozenset({JobState.PROCESSING})],
    ids=["all", "succeeded", "processing"],
)
def test_the_job_list_reads_about_a_page_per_state_however_many_jobs(
    store: DjangoStoreUnderTest,
    storage: DjangoStorage,
    clock: FakeClock,
    states: frozenset[JobState],
) -> None:
    """No index holds every job newest first (each of a job's writes would add an entry
    to it): the dashboard's list reads each state newest first through an index of its
    own and merges, a page or so per state among 3,000 jobs."""
    storage.enqueue([make_job(clock) for _ in range(3000)])
    in_flight = claim(store, "w1", max_count=2900)
    storage.apply_many([succeed(job, clock) for job in in_flight[100:]])
    connection = connections[ALIAS]
    with connection.cursor() as cursor:  # statistics, as autovacuum keeps for such a table
        cursor.execute(f'ANALYZE "{Job._meta.db_table}"')

    with CaptureQueriesContext(connection) as listed:
        page = store.monitoring.query_jobs(JobQuery(states=states, limit=50))

    assert len(page.items) == 50 and page.next_cursor is not None
    sent = [query["sql"] for query in listed.captured_queries]
    reads = [_SETTINGS.sub("", sql) for sql in sent if "SELECT" in sql]
    assert reads, sent
    with connection.cursor() as cursor:
        for read in reads:
            cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + read)
            (plan,) = cursor.fetchone()
            root = (json.loads(plan) if isinstance(plan, str) else plan)[0]["Plan"]
            assert "Seq Scan" not in _scans_of_jobs(root), json.dumps(root, indent=1)
            assert _rows_read(root) <= 200, json.dumps(root, indent=1)


def _explained_acknowledgement(
    batch: list[JobTransition], clock: FakeClock, before: str
) -> dict[str, Any]:
    """The executed plan of the acknowledgement of ``batch``, sent after ``before`` as the
    hot path sends it (rolled back)."""
    connection = connections[ALIAS]
    with transaction.atomic(using=ALIAS), connection.cursor() as cursor:
        if before:
            cursor.execute(before)
        cursor.execute(
            "EXPLAIN (ANALYZE, FORMAT JSON) " + COMPLETE.sql,
            complete_parameters(batch, clock.now()),
        )
        (plan,) = cursor.fetchone()
        transaction.set_rollback(True, using=ALIAS)
    root: dict[str, Any] = (json.loads(plan) if isinstance(plan, str) else plan)[0]["Plan"]
    return root


def _scans_of_jobs(plan: dict[str, Any]) -> list[str]:
    kind = plan["Node Type"]
    here = [kind] if "Scan" in kind and plan.get("Relation Name") == Job._meta.db_table else []
    return here + [scan for child in plan.get("Plans", ()) for scan in _scans_of_jobs(child)]


def test_a_large_acknowledgement_probes_its_rows_however_small_the_table_looks(
    store: DjangoStoreUnderTest, storage: DjangoStorage, clock: FakeClock
) -> None:
    """600 transitions in a table of 3,000 jobs: costed alone, a hash join over every job
    looks cheaper than 600 probes (and a table the statistics take for small makes it
    look cheaper still); the acknowledgement is sent with the planner told to probe."""
    storage.enqueue([make_job(clock) for _ in range(3000)])
    in_flight = claim(store, "w1", max_count=3000)
    storage.apply_many([succeed(job, clock) for job in in_flight[600:]])
    batch = [succeed(job, clock) for job in in_flight[:600]]

    unguided = _explained_acknowledgement(batch, clock, "")
    probed = _explained_acknowledgement(batch, clock, PROBE_BY_INDEX)

    assert "Seq Scan" in _scans_of_jobs(unguided), "the planner no longer needs telling"
    assert _scans_of_jobs(probed) == ["Index Scan"], json.dumps(probed, indent=1)
    assert probed["Actual Rows"] == len(batch)
    assert _rows_read(probed) <= 2 * len(batch), json.dumps(probed, indent=1)


def test_a_statement_in_autocommit_is_bounded_and_leaves_no_setting_behind() -> None:
    connection = connections[ALIAS]
    tx = Transactions(ALIAS, vendor_for(connection), statement_timeout=timedelta(seconds=0.2))

    def slow() -> None:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_sleep(2)")

    with pytest.raises(DatabaseError):
        tx.write(slow, one_statement=True)
    with connection.cursor() as cursor:
        cursor.execute("SHOW statement_timeout")
        (setting,) = cursor.fetchone() or ("?",)
    assert setting == "0", "the storage's bound leaked into the session"
    assert connection.get_autocommit() and not connection.in_atomic_block


@pytest.mark.parametrize("client_binding", [True, False])
def test_statements_are_bounded_whether_or_not_a_message_can_carry_two(
    client_binding: bool,
) -> None:
    connection = connections[ALIAS]
    vendor = PostgreSQL(client_binding=client_binding)
    tx = Transactions(ALIAS, vendor, statement_timeout=timedelta(seconds=0.2))

    def slow() -> None:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.execute("SELECT pg_sleep(2)")

    with pytest.raises(DatabaseError):
        tx.write(slow)
    with pytest.raises(DatabaseError):
        tx.read(slow)


def test_claim_acknowledge_and_enqueue_are_one_round_trip_each(
    storage: DjangoStorage, clock: FakeClock
) -> None:
    job = make_job(clock)
    storage.enqueue([make_job(clock)])  # the connection is open, its first queries done

    with wire_messages() as sent:
        storage.enqueue([job])
        (claimed,) = storage.claim(claim_request("w1", ["default"], 1))
        assert storage.apply_many([succeed(claimed, clock, activate_continuations=True)]) == [True]

    assert len(sent) == 3, sent
    assert all(text.startswith("SET LOCAL statement_timeout") for text in sent), sent
    assert PROBE_BY_INDEX in sent[2], "the acknowledgement is sent with the planner told to probe"


def test_a_schedulers_due_work_is_one_round_trip_per_step(
    storage: DjangoStorage, clock: FakeClock
) -> None:
    """A pass woken for a cron occurrence and a retry: the due definitions, the fire (its
    compare-and-set, the job's insert and its announcement), the activation and the next
    due time, one prepared statement each. (The fire's transaction of four round trips and
    the ORM's compiled queries made the occurrence several milliseconds late.)"""
    now = clock.now()
    minute = timedelta(minutes=1)
    storage.upsert_recurring(make_recurring(clock, "each-minute", next_fire_time=now))
    storage.enqueue([make_job(clock, state=JobState.SCHEDULED, due_at=now)])

    with wire_messages() as sent:
        (due,) = storage.get_due_recurring(now, 10)
        occurrence = make_job(clock, recurring_id=due.id)
        fired = storage.try_fire_recurring(due.id, due.next_fire_time, now + minute, occurrence)
        activated = storage.activate_due(now, 10)
        next_due = storage.next_due_time(now)

    assert (fired, activated, next_due) == (FireOutcome.FIRED, 1, now + minute)
    assert [_statement_of(text) for text in sent] == [
        "due_recurring",
        "fire",
        "activate",
        "due_heads",
    ], sent
    assert all(text.startswith("SET LOCAL statement_timeout") for text in sent), sent
    stored = storage.get_job(occurrence.id)
    assert stored is not None and stored.state is JobState.ENQUEUED


def _statement_of(text: str) -> str | None:
    found = re.search(r"(?:PREPARE|EXECUTE) millrace_(\w+)_[0-9a-f]{10} \(", text)
    return found.group(1) if found else None


def test_the_hot_statements_are_planned_once_per_session_not_per_call(
    storage: DjangoStorage, clock: FakeClock
) -> None:
    """Each claim and acknowledgement reuses its session's plan: planning the claim
    anew every time cost more server time than running it."""
    calls = 8
    for _ in range(calls):
        storage.enqueue([make_job(clock)])
        (claimed,) = storage.claim(claim_request("w1", ["default"], 1))
        assert storage.apply_many([succeed(claimed, clock)]) == [True]

    with connections[ALIAS].cursor() as cursor:
        cursor.execute(
            "SELECT split_part(name, '_', 2), generic_plans, custom_plans "
            "FROM pg_prepared_statements WHERE name IN ('{}')".format(
                "', '".join([CLAIM_ONE_QUEUE.name, COMPLETE.name])
            )
        )
        plans = {purpose: (generic, custom) for purpose, generic, custom in cursor.fetchall()}
    assert plans == {"claim": (calls, 0), "complete": (calls, 0)}, plans


def test_an_instance_is_read_inside_its_bounded_storage_call(
    store: DjangoStoreUnderTest, clock: FakeClock
) -> None:
    instance = create_instance(store, clock)
    with wire_messages(ALIAS) as sent:
        read = store.workflows.get_instance(instance.id)
        assert store.workflows.get_instance(uuid4()) is None
    assert read is not None and read.id == instance.id
    assert len(sent) == 2, sent
    assert all(text.startswith("SET LOCAL statement_timeout") for text in sent), sent


def claim_request(worker: str, queues: list[str], count: int) -> ClaimRequest:
    return ClaimRequest(
        worker_id=worker, queues=frozenset(queues), max_count=count, lease=timedelta(minutes=5)
    )


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
