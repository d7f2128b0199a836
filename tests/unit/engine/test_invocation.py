"""Invocation capture at enqueue, and finding the job again at run time."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import UTC, date, datetime
from decimal import Decimal
from enum import StrEnum
from typing import Any
from uuid import uuid4

import pytest

from millrace_django.clock import FakeClock
from millrace_django.contract import Invocation, JobQuery, JobRecord, JobState
from millrace_django.engine import (
    ArgumentsTooLarge,
    InvalidJobArguments,
    InvalidStoredArguments,
    JobClient,
    JobDefinition,
    UnresolvableTarget,
    UnserializableArgument,
    capture,
    decode,
    resolve,
)
from millrace_django.storage.memory import MemoryStorage
from tests.unit.engine import sample_jobs


class Color(StrEnum):
    RED = "red"


class FakeModel:
    """Quacks like a Django model instance."""

    _meta = object()
    pk = 7


def test_arguments_are_bound_to_the_signature_and_stored_as_json() -> None:
    invocation = capture(sample_jobs.send_invoice, ("42",), {"copies": 2})
    assert invocation == Invocation(
        target="tests.unit.engine.sample_jobs:send_invoice", args=("42",), kwargs={"copies": 2}
    )


def test_keyword_arguments_for_positional_parameters_are_normalised_to_positions() -> None:
    assert capture(sample_jobs.add, (), {"a": 1, "b": 2}).args == (1, 2)


def test_variadic_arguments_are_captured() -> None:
    invocation = capture(sample_jobs.spread, (1, 2, 3), {"flag": True})
    assert invocation.args == (1, 2, 3)
    assert invocation.kwargs == {"flag": True}


def test_nested_json_values_are_accepted_and_copied() -> None:
    payload: dict[str, Any] = {"items": [1, 2.5, None, True, {"name": "x"}]}
    invocation = capture(sample_jobs.send_confirmation, (payload,), {})
    payload["items"].append("later")
    assert invocation.args == ({"items": [1, 2.5, None, True, {"name": "x"}]},)


@pytest.mark.parametrize(
    ("job", "args", "kwargs"),
    [
        (sample_jobs.add, (1, 2), {}),
        (sample_jobs.add, (1,), {"b": 2}),
        (sample_jobs.add, (), {"b": 2, "a": 1}),
        (sample_jobs.send_invoice, ("42",), {"copies": 2}),
        (sample_jobs.send_invoice, (), {"copies": 2, "order_id": "42"}),
        (sample_jobs.spread, (1, 2, 3), {"z": 1, "a": 2}),
        (sample_jobs.spread, (), {"z": 1, "first": 0, "a": 2}),
    ],
)
def test_every_call_is_stored_as_the_signature_binds_it(
    job: JobDefinition[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    bound = job.signature.bind(*args, **kwargs)
    for _ in range(2):  # the second capture takes the remembered call shape
        invocation = capture(job, args, kwargs)
        assert invocation.args == tuple(bound.args)
        assert list(invocation.kwargs.items()) == list(bound.kwargs.items())


def test_a_remembered_call_shape_still_checks_every_value() -> None:
    capture(sample_jobs.spread, (1, [2]), {"when": {"a": [1.5]}})
    with pytest.raises(UnserializableArgument, match=r"'\*rest\[0\]' is a tuple.*\(at \[0\]\)"):
        capture(sample_jobs.spread, (1, [(2,)]), {"when": {"a": [1.5]}})
    with pytest.raises(UnserializableArgument, match=r"'when' is a Color.*\(at \['a'\]\)"):
        capture(sample_jobs.spread, (1, [2]), {"when": {"a": Color.RED}})
    with pytest.raises(InvalidJobArguments, match="missing a required argument: 'b'"):
        capture(sample_jobs.add, (1,), {})
    with pytest.raises(InvalidJobArguments, match="missing a required argument: 'b'"):
        capture(sample_jobs.add, (1,), {})


def test_deeply_nested_values_are_copied_like_a_json_round_trip() -> None:
    deep: Any = ["bottom", 10**30, -0.0]
    for _ in range(50):
        deep = {"next": [deep]}
    invocation = capture(sample_jobs.send_confirmation, (deep,), {})
    assert invocation.args == (deep,)
    assert invocation.args[0] is not deep


def test_arguments_that_do_not_fit_the_signature_raise_a_clear_type_error() -> None:
    with pytest.raises(TypeError, match=r"send_confirmation\(order_id\): missing"):
        capture(sample_jobs.send_confirmation, (), {})
    with pytest.raises(InvalidJobArguments, match="unexpected keyword argument 'colour'"):
        capture(sample_jobs.send_confirmation, ("1",), {"colour": "red"})


def test_passing_context_yourself_is_refused() -> None:
    with pytest.raises(InvalidJobArguments, match="supplied by the worker"):
        capture(sample_jobs.with_context, ("x",), {"context": None})


@pytest.mark.parametrize(
    ("value", "hint"),
    [
        ((1, 2), "tuple"),
        ({1, 2}, "set"),
        (datetime(2026, 1, 1, tzinfo=UTC), "isoformat"),
        (date(2026, 1, 1), "date"),
        (Decimal("1.10"), "str"),
        (uuid4(), "UUID"),
        (b"raw", "bytes"),
        (float("nan"), "not valid JSON"),
        (Color.RED, "subclass"),
        (object(), "object"),
        ({1: "a"}, "keys are strings"),
        ([{"deep": (1,)}], r"tuple.*\[0\]\['deep'\]"),
        ("a\x00b", r"U\+0000 \(NUL\), which PostgreSQL cannot store"),
        ({"note": ["a\x00b"]}, r"U\+0000.*\(at \['note'\]\[0\]\)"),
        ({"a\x00b": 1}, r"has a key that contains the character U\+0000"),
    ],
)
def test_values_json_would_change_are_refused_naming_the_argument(value: Any, hint: str) -> None:
    with pytest.raises(UnserializableArgument, match=hint) as raised:
        capture(sample_jobs.send_confirmation, (value,), {})
    assert raised.value.argument == "order_id"
    assert "'order_id'" in str(raised.value)
    assert isinstance(raised.value, TypeError)


def _stored_size(invocation: Invocation) -> int:
    return len(json.dumps({"args": list(invocation.args), "kwargs": dict(invocation.kwargs)}))


@pytest.mark.parametrize(
    "text",
    ["x" * 1000, "\u00e9" * 1000, "\U0001f600" * 1000, "\x01" * 1000],
    ids=["ascii", "accented", "astral", "control"],
)
@pytest.mark.parametrize("nested", [False, True], ids=["plain", "past-the-quick-copy"])
def test_arguments_up_to_the_limit_are_captured_and_one_byte_more_is_refused(
    text: str, nested: bool
) -> None:
    value: Any = {"text": text, "n": [1, 2.5, None, True]}
    if nested:
        for _ in range(40):
            value = [value]
    size = _stored_size(capture(sample_jobs.spread, (value,), {"tag": "t"}))
    assert capture(sample_jobs.spread, (value,), {"tag": "t"}, max_bytes=size).args == (value,)
    with pytest.raises(ArgumentsTooLarge) as raised:
        capture(sample_jobs.spread, (value,), {"tag": "t"}, max_bytes=size - 1)
    assert str(raised.value) == (
        f"cannot enqueue {sample_jobs.spread.target}: its arguments take {size} bytes as JSON, "
        f"over the limit of {size - 1} bytes (MILLRACE['MAX_ARGUMENTS_BYTES']); store large "
        "data elsewhere (a file, a model row) and pass its key"
    )
    assert isinstance(raised.value, ValueError)


def test_many_small_values_count_towards_the_limit() -> None:
    values = [[n, -(10**18), 1e-300, False, None, {"k": ""}] for n in range(1000)]
    size = _stored_size(capture(sample_jobs.send_confirmation, (values,), {}))
    capture(sample_jobs.send_confirmation, (values,), {}, max_bytes=size)
    with pytest.raises(ArgumentsTooLarge):
        capture(sample_jobs.send_confirmation, (values,), {}, max_bytes=size - 1)


def test_arguments_over_the_clients_limit_are_refused_and_nothing_is_written(
    client: JobClient, storage: MemoryStorage
) -> None:
    limit = client.config.max_arguments_bytes
    assert limit == 1 << 20
    with pytest.raises(ArgumentsTooLarge, match=f"over the limit of {limit} bytes"):
        sample_jobs.send_confirmation.enqueue("x" * limit)
    with pytest.raises(ArgumentsTooLarge), client.batch() as batch:
        batch.enqueue(sample_jobs.send_confirmation, "1")
        batch.enqueue(sample_jobs.send_confirmation, "x" * limit)
    with pytest.raises(ArgumentsTooLarge):
        client.upsert_recurring(
            "big", sample_jobs.send_confirmation, cron="* * * * *", args=["x" * limit]
        )
    assert storage.query_jobs(JobQuery()).items == []


def test_a_model_instance_gets_the_primary_key_hint() -> None:
    with pytest.raises(UnserializableArgument, match=r"pass its primary key \(obj.pk\) instead"):
        capture(sample_jobs.send_confirmation, (FakeModel(),), {})


def test_variadic_arguments_are_named_in_errors() -> None:
    with pytest.raises(UnserializableArgument, match=r"'\*rest\[1\]'"):
        capture(sample_jobs.spread, (1, 2, {3}), {})
    with pytest.raises(UnserializableArgument, match="'when'"):
        capture(sample_jobs.spread, (1,), {"when": datetime(2026, 1, 1)})


def test_a_self_containing_value_is_refused() -> None:
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(UnserializableArgument, match="contains itself"):
        capture(sample_jobs.send_confirmation, (loop,), {})


def test_nothing_is_written_when_validation_fails(
    client: JobClient, storage: MemoryStorage
) -> None:
    with pytest.raises(UnserializableArgument):
        sample_jobs.send_confirmation.enqueue((1, 2))
    with pytest.raises(InvalidJobArguments):
        sample_jobs.add.enqueue(1)
    assert storage.query_jobs(JobQuery()).items == []


def test_a_stored_target_resolves_to_its_job() -> None:
    assert resolve("tests.unit.engine.sample_jobs:add") is sample_jobs.add


def test_a_missing_module_is_unresolvable_with_a_clear_error() -> None:
    with pytest.raises(UnresolvableTarget, match=r"cannot import module 'tests.unit.engine.gone'"):
        resolve("tests.unit.engine.gone:add")


def test_a_missing_function_is_unresolvable_with_a_clear_error() -> None:
    with pytest.raises(UnresolvableTarget, match=r"has no job 'renamed'.*breaking deploy"):
        resolve("tests.unit.engine.sample_jobs:renamed")


def test_a_function_that_is_not_a_job_is_unresolvable() -> None:
    with pytest.raises(UnresolvableTarget, match="not decorated with @job"):
        resolve("tests.unit.engine.sample_jobs:not_a_job")


@pytest.mark.parametrize("target", ["no_colon", ":name", "module:"])
def test_a_malformed_target_is_unresolvable(target: str) -> None:
    with pytest.raises(UnresolvableTarget, match=r"not a 'package.module:function'"):
        resolve(target)


def _stored(invocation: Invocation) -> JobRecord:
    return JobRecord(
        id=uuid4(),
        queue="default",
        invocation=invocation,
        state=JobState.PROCESSING,
        created_at=FakeClock().now(),
    )


def test_stored_arguments_decode_back_to_the_call() -> None:
    invocation = capture(sample_jobs.send_invoice, ("42",), {"copies": 3})
    assert decode(sample_jobs.send_invoice, invocation) == (["42"], {"copies": 3})


def test_stored_arguments_that_no_longer_fit_are_undecodable() -> None:
    invocation = Invocation(target=sample_jobs.add.target, args=(1, 2, 3))
    with pytest.raises(InvalidStoredArguments, match=r"no longer fit.*breaking deploy"):
        decode(sample_jobs.add, invocation)


def test_stored_arguments_of_the_wrong_shape_are_undecodable() -> None:
    good = capture(sample_jobs.add, (1, 2), {})
    with pytest.raises(InvalidStoredArguments, match="not a list"):
        decode(sample_jobs.add, replace(good, args="12"))
    with pytest.raises(InvalidStoredArguments, match="not an object"):
        decode(sample_jobs.add, replace(good, kwargs=[1]))  # type: ignore[arg-type]
    with pytest.raises(InvalidStoredArguments, match="'context'"):
        decode(sample_jobs.with_context, Invocation(target="t:t", kwargs={"context": 1}))
