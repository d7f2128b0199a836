"""Flow-control limits at the edge: ``@job(concurrency=, rate=, limit_key=)``, ``using()``
and the settings' queue limits are checked where given and fixed on each job as it is
built; a claim then starts no more than they allow."""

from __future__ import annotations

from datetime import timedelta

import pytest

from millrace_django.clock import FakeClock
from millrace_django.conf import InvalidSettings, parse_settings
from millrace_django.conformance.support import make_job
from millrace_django.contract import ClaimRequest, Invocation, Limit, Rate, RecurringRecord
from millrace_django.engine import EngineSettings, InvalidJobDefinition, JobClient, job
from millrace_django.engine.declared_limits import queue_limit
from millrace_django.engine.outcomes import failure_observer_jobs
from millrace_django.engine.recurring import occurrence
from millrace_django.storage.memory import MemoryStorage
from tests.unit.engine import sample_jobs

EXPORT = "tests.unit.engine.test_limits:export_report"
SYNC = "tests.unit.engine.test_limits:sync_customer"


@job(concurrency=2)
def export_report(report_id: int) -> None:
    pass


@job(concurrency=1, rate="600/m", limit_key="customer_id")
def sync_customer(customer_id: str, full: bool = False) -> None:
    pass


def limits_of(storage: MemoryStorage, job_id: object) -> tuple[Limit, ...]:
    stored = storage.get_job(job_id)  # type: ignore[arg-type]
    assert stored is not None
    return stored.limits


def claim(storage: MemoryStorage, max_count: int = 10) -> int:
    request = ClaimRequest(
        worker_id="w", queues=frozenset({"default", "emails"}), max_count=max_count,
        lease=timedelta(minutes=5),
    )  # fmt: skip
    return len(storage.claim(request))


def test_a_function_limit_is_stored_on_each_job_under_the_functions_scope(
    client: JobClient, storage: MemoryStorage
) -> None:
    job_id = export_report.enqueue(7)

    assert limits_of(storage, job_id) == (Limit(scope=f"job:{EXPORT}", concurrency=2),)


def test_a_keyed_limit_takes_its_scope_from_the_argument_however_it_is_passed(
    client: JobClient, storage: MemoryStorage
) -> None:
    by_position = sync_customer.enqueue("c-42")
    by_keyword = sync_customer.enqueue(customer_id="c-42", full=True)
    other = sync_customer.enqueue("c-7")

    rate = Rate(600, timedelta(minutes=1))
    assert limits_of(storage, by_position) == (
        Limit(scope=f"job:{SYNC}#c-42", concurrency=1, rate=rate),
    )
    assert limits_of(storage, by_keyword) == limits_of(storage, by_position)
    assert limits_of(storage, other)[0].scope == f"job:{SYNC}#c-7"
    assert claim(storage) == 2, "one sync per customer runs at once"


def test_using_sets_or_overrides_a_functions_limits(
    client: JobClient, storage: MemoryStorage
) -> None:
    narrowed = export_report.using(concurrency=1, rate="5/s").enqueue(1)
    limited = sample_jobs.send_confirmation.using(rate="3/10s").enqueue("o-1")
    plain = sample_jobs.send_confirmation.enqueue("o-2")

    assert limits_of(storage, narrowed) == (
        Limit(scope=f"job:{EXPORT}", concurrency=1, rate=Rate(5, timedelta(seconds=1))),
    )
    assert limits_of(storage, limited)[0].rate == Rate(3, timedelta(seconds=10))
    assert limits_of(storage, plain) == ()


def test_a_queue_limit_from_the_settings_is_carried_by_every_job_of_the_queue(
    storage: MemoryStorage, clock: FakeClock
) -> None:
    emails = queue_limit("emails", 3, None)
    config = EngineSettings(queues={"default", "emails"}, queue_limits={"emails": emails})
    client = JobClient(storage, clock, config)

    in_emails = client.enqueue(sample_jobs.send_invoice, "o-1")
    both = client.enqueue(export_report.using(queue="emails"), 1)
    elsewhere = client.enqueue(sample_jobs.send_confirmation, "o-2")

    assert limits_of(storage, in_emails) == (emails,)
    assert limits_of(storage, both) == (emails, Limit(scope=f"job:{EXPORT}", concurrency=2))
    assert limits_of(storage, elsewhere) == ()


def test_a_recurring_occurrence_carries_its_queues_and_its_functions_limits(
    clock: FakeClock,
) -> None:
    record = RecurringRecord(
        id="nightly",
        cron="0 3 * * *",
        queue="emails",
        invocation=Invocation(target=SYNC, args=["c-9"]),
        next_fire_time=clock.now(),
        created_at=clock.now(),
        updated_at=clock.now(),
    )
    emails = queue_limit("emails", None, "1/s")

    fired = occurrence(record, clock, {"emails": emails})

    assert [limit.scope for limit in fired.limits] == ["queue:emails", f"job:{SYNC}#c-9"]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"concurrency": 0}, "concurrency must be an integer of at least 1"),
        ({"concurrency": "2"}, "concurrency must be an integer of at least 1"),
        ({"rate": "10 per second"}, "a rate reads like '10/s'"),
        ({"rate": "0/s"}, "a rate allows 1 to 10000 starts"),
    ],
)
def test_bad_limits_are_refused_where_they_are_given(options: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        job(**options)(sample_jobs.not_a_job)
    with pytest.raises(ValueError, match=message):
        export_report.using(**options)


def test_a_limit_key_must_name_a_parameter_and_key_a_limit() -> None:
    with pytest.raises(InvalidJobDefinition, match="must name one of its parameters"):
        job(concurrency=1, limit_key="customer")(sample_jobs.not_a_job)
    with pytest.raises(InvalidJobDefinition, match="keys no limit"):
        job(limit_key="order_id")(sample_jobs.not_a_job)


def test_a_key_that_is_not_text_or_a_number_is_refused_at_enqueue(client: JobClient) -> None:
    with pytest.raises(TypeError, match="must be a str or an int"):
        sync_customer.enqueue(["c-1"])


def test_queue_limits_are_validated_at_the_settings_boundary() -> None:
    settings = parse_settings(
        {"QUEUES": ["default", "exports"], "QUEUE_LIMITS": {"exports": {"rate": "10/s"}}}
    )
    assert settings.queue_limits["exports"].rate == Rate(10, timedelta(seconds=1))

    for raw, problem in [
        ({"QUEUE_LIMITS": {"default": {"rate": "ten a second"}}}, "millrace.E003"),
        ({"QUEUE_LIMITS": {"default": {"concurrency": 0}}}, "millrace.E003"),
        ({"QUEUE_LIMITS": {"default": {"burst": 3}}}, "millrace.E003"),
        ({"QUEUE_LIMITS": {"exports": {"concurrency": 1}}}, "millrace.E011"),
    ]:
        with pytest.raises(InvalidSettings) as raised:
            parse_settings(raw)
        assert [p.id for p in raised.value.problems] == [problem]


@job(concurrency=1, limit_key="dead_job_id")
def page_oncall(dead_job_id: str) -> None:
    pass


def test_a_failure_observer_carries_its_functions_and_its_queues_limits(
    clock: FakeClock,
) -> None:
    dead = make_job(clock)
    config = EngineSettings(queue_limits={"default": queue_limit("default", 4, None)})

    (observer,) = failure_observer_jobs(dead, [page_oncall], clock=clock, config=config)

    assert [limit.scope for limit in observer.limits] == [
        "queue:default",
        f"job:tests.unit.engine.test_limits:page_oncall#{dead.id}",
    ]
