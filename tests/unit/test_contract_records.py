"""Records are frozen data; the attempt-history rule and tenant filters are shared logic."""

import dataclasses
import json
from datetime import UTC, datetime, timedelta
from uuid import uuid4

import pytest

from millrace_django.contract import (
    AttemptOutcome,
    Invocation,
    JobRecord,
    JobState,
    JobTransition,
    RetryKind,
    RetrySpec,
    TenantFilter,
    clamp_limit,
    oldest_kept_attempt,
    outcome_of,
    retry_json,
    retry_of,
)
from millrace_django.storage.orm.rows import JobRowReader, row_retry

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def _job() -> JobRecord:
    return JobRecord(
        id=uuid4(),
        queue="default",
        invocation=Invocation(target="app.jobs:send"),
        state=JobState.ENQUEUED,
        created_at=NOW,
    )


def _transition(target: JobState, failures: int) -> JobTransition:
    return JobTransition(
        job_id=uuid4(),
        expected_worker_id="w1",
        expected_attempt=1,
        target=target,
        failures=failures,
    )


def test_records_are_frozen() -> None:
    job = _job()
    with pytest.raises(dataclasses.FrozenInstanceError):
        job.state = JobState.DEAD  # type: ignore[misc]


def test_records_take_keyword_arguments_only() -> None:
    with pytest.raises(TypeError):
        Invocation("app.jobs:send")  # type: ignore[misc]


def test_a_new_job_defaults_to_no_retry_and_no_attempts() -> None:
    job = _job()
    assert job.retry == RetrySpec()
    assert (job.attempt, job.failures, job.cancel_requested) == (0, 0, False)


def test_a_failure_is_recorded_as_a_failed_attempt() -> None:
    assert outcome_of(_transition(JobState.FAILED, 1), prior_failures=0) is AttemptOutcome.FAILED


def test_a_dead_transition_that_counts_a_failure_is_recorded() -> None:
    outcome = outcome_of(_transition(JobState.DEAD, 3), prior_failures=2)
    assert outcome is AttemptOutcome.FAILED


def test_a_poison_pill_verdict_records_nothing() -> None:
    assert outcome_of(_transition(JobState.DEAD, 2), prior_failures=2) is None


def test_a_release_is_recorded_as_an_interruption() -> None:
    outcome = outcome_of(_transition(JobState.ENQUEUED, 0), prior_failures=0)
    assert outcome is AttemptOutcome.INTERRUPTED


def test_success_and_cancellation_record_nothing() -> None:
    assert outcome_of(_transition(JobState.SUCCEEDED, 0), prior_failures=0) is None
    assert outcome_of(_transition(JobState.CANCELLED, 0), prior_failures=0) is None


def test_history_keeps_the_last_ten_attempts() -> None:
    assert oldest_kept_attempt(15) == 6
    assert oldest_kept_attempt(3) <= 1


@pytest.mark.parametrize(("asked", "given"), [(0, 50), (-5, 50), (1, 1), (200, 200), (10_000, 200)])
def test_page_sizes_are_clamped_never_rejected(asked: int, given: int) -> None:
    assert clamp_limit(asked) == given


def test_tenant_filters_match_any_untenanted_or_one_tenant() -> None:
    assert TenantFilter.any().matches(None) and TenantFilter.any().matches("acme")
    assert TenantFilter.untenanted().matches(None)
    assert not TenantFilter.untenanted().matches("acme")
    assert TenantFilter.of("acme").matches("acme")
    assert not TenantFilter.of("acme").matches(None)
    assert not TenantFilter.of("acme").matches("globex")


def test_a_tenant_filter_needs_a_non_blank_tenant() -> None:
    with pytest.raises(ValueError, match="non-blank"):
        TenantFilter.of("  ")


def test_retry_delays_are_timedeltas() -> None:
    spec = RetrySpec(max_attempts=3, base_delay=timedelta(seconds=5))
    assert spec.base_delay.total_seconds() == 5


@pytest.mark.parametrize(
    "values",
    [
        {"id": uuid4(), "queue": "q", "state": JobState.ENQUEUED, "created_at": NOW},
        {
            field.name: getattr(_job(), field.name) for field in dataclasses.fields(JobRecord)
        },  # every field given: the defaults are skipped
    ],
    ids=["some fields", "every field"],
)
def test_a_record_built_from_values_equals_the_constructed_one(values: dict) -> None:
    values = {**values, "invocation": Invocation(target="app.jobs:send")}
    assert JobRecord.from_values(values) == JobRecord(**values)


def test_a_transition_built_from_values_equals_the_constructed_one() -> None:
    values = {
        "job_id": uuid4(),
        "expected_worker_id": "w1",
        "expected_attempt": 2,
        "target": JobState.SUCCEEDED,
        "failures": 0,
        "finished_at": NOW,
    }
    assert JobTransition.from_values(values) == JobTransition(**values)


@pytest.mark.parametrize(
    ("drop", "add", "message"),
    [
        ((), {"colour": "red"}, r"unknown: \['colour'\], missing: \[\]"),
        (("queue",), {}, r"unknown: \[\], missing: \['queue'\]"),
        # as many keys as fields (so the defaults are skipped), one of them unknown
        (("priority",), {"colour": "red"}, r"unknown: \['colour'\], missing: \['priority'\]"),
    ],
)
def test_building_from_values_names_unknown_and_missing_fields(
    drop: tuple[str, ...], add: dict, message: str
) -> None:
    values = {field.name: getattr(_job(), field.name) for field in dataclasses.fields(JobRecord)}
    values = {name: value for name, value in values.items() if name not in drop} | add
    with pytest.raises(TypeError, match=message):
        JobRecord.from_values(values)


def test_a_record_built_complete_equals_the_constructed_one() -> None:
    given = {"id": uuid4(), "queue": "default", "state": JobState.ENQUEUED, "created_at": NOW}
    values = {**given, "invocation": Invocation(target="app.jobs:send")}
    complete = values | JobRecord.defaults_besides(values)
    record = JobRecord.from_complete(dict(complete))
    assert record == JobRecord(**values)
    assert record.__dict__.keys() == {f.name for f in dataclasses.fields(JobRecord)}


@pytest.mark.parametrize(
    ("given", "message"),
    [
        ({"colour"}, r"unknown: \['colour'\], missing: \['created_at', 'id', "),
        ({"id", "invocation", "state", "created_at"}, r"unknown: \[\], missing: \['queue'\]"),
    ],
)
def test_the_defaults_besides_given_fields_name_unknown_and_missing_ones(
    given: set[str], message: str
) -> None:
    with pytest.raises(TypeError, match=message):
        JobRecord.defaults_besides(given)


def test_a_row_reader_builds_the_record_of_a_row_and_its_known_values() -> None:
    reader = JobRowReader(known=("state", "worker_id"))
    job = dataclasses.replace(
        _job(),
        state=JobState.PROCESSING,
        worker_id="w1",
        result={"sent": 1},
        retry=RetrySpec(kind=RetryKind.FIXED, max_attempts=3),
    )
    stored = {"result": json.dumps(job.result)}
    retry = json.dumps(retry_json(job.retry))
    tail = [job.id, "app.jobs:send", '{"args": [], "kwargs": {}}', retry, None]
    row = [stored.get(name, getattr(job, name, None)) for name in reader.columns[:-5]] + tail
    known = {"state": JobState.PROCESSING, "worker_id": "w1"}
    read = reader.read(row, known)
    assert read == job
    assert read.__dict__.keys() == {f.name for f in dataclasses.fields(JobRecord)}
    with pytest.raises(ValueError, match="known values of"):
        reader.read(row, {"state": JobState.PROCESSING})


def test_a_call_without_arguments_is_one_shared_read_only_invocation() -> None:
    shared = Invocation.without_arguments("app.jobs:send")
    assert shared is Invocation.without_arguments("app.jobs:send")
    assert shared == Invocation(target="app.jobs:send")
    assert Invocation.without_arguments("app.jobs:other").target == "app.jobs:other"
    with pytest.raises(TypeError):
        shared.kwargs["sneaky"] = 1  # type: ignore[index]


def test_a_retry_policy_reads_back_from_its_json_exactly() -> None:
    policy = RetrySpec(
        kind=RetryKind.EXPONENTIAL,
        max_attempts=5,
        base_delay=timedelta(milliseconds=1500),
        max_delay=timedelta(minutes=2),
        jitter=True,
        retry_on=("builtins.ConnectionError",),
        give_up_on=("builtins.ValueError",),
    )
    assert retry_of(json.loads(json.dumps(retry_json(policy)))) == policy
    assert retry_of(retry_json(RetrySpec())) == RetrySpec()


@pytest.mark.parametrize(
    "change",
    [{"max_attempts": "3"}, {"jitter": "no"}, {"base_delay_us": 1.5}, {"retry_on": [3]}],
)
def test_a_retry_policy_of_another_shape_is_refused_and_a_row_reads_it_as_none(
    change: dict[str, object],
) -> None:
    stored = retry_json(RetrySpec(kind=RetryKind.FIXED, max_attempts=3)) | change
    with pytest.raises(TypeError):
        retry_of(stored)
    assert row_retry(stored) == RetrySpec()
