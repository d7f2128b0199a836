"""@job: what it accepts, what it refuses at decoration, and what it records."""

from __future__ import annotations

import functools
from datetime import timedelta
from typing import Any

import pytest

from millrace_django.engine import (
    ConfiguredJob,
    InvalidJobDefinition,
    JobDefinition,
    JobOptions,
    NotConfigured,
    Retry,
    job,
    lookup,
    registered_jobs,
    set_default_client,
)
from tests.unit.engine import sample_jobs


def test_a_bare_decorated_function_is_registered_by_its_module_and_name() -> None:
    assert sample_jobs.send_confirmation.target == (
        "tests.unit.engine.sample_jobs:send_confirmation"
    )
    assert (
        lookup("tests.unit.engine.sample_jobs:send_confirmation") is sample_jobs.send_confirmation
    )
    assert "tests.unit.engine.sample_jobs:add" in registered_jobs()


def test_decoration_options_are_recorded_on_the_definition() -> None:
    definition = sample_jobs.send_invoice
    assert definition.options == JobOptions(
        queue="emails",
        priority=5,
        retry=Retry.fixed(timedelta(seconds=30), 3),
        timeout=timedelta(minutes=2),
    )
    assert definition.failure_observers == (
        sample_jobs.notify_ops,
        "tests.unit.engine.sample_jobs:audit",
    )


def test_a_decorated_function_stays_directly_callable() -> None:
    assert sample_jobs.add(2, 3) == 5
    assert sample_jobs.send_invoice("42", copies=2) == "invoice 42 x2"
    assert sample_jobs.add.__name__ == "add"


def test_async_functions_are_jobs_too() -> None:
    assert sample_jobs.async_add.is_async
    assert not sample_jobs.add.is_async


def test_a_context_parameter_is_detected_and_left_out_of_the_bound_signature() -> None:
    assert sample_jobs.with_context.accepts_context
    assert list(sample_jobs.with_context.signature.parameters) == ["label"]
    assert not sample_jobs.add.accepts_context


def test_nested_functions_are_refused_at_decoration() -> None:
    def inner() -> None: ...

    with pytest.raises(InvalidJobDefinition, match="nested inside another function"):
        job(inner)


def test_lambdas_are_refused_at_decoration() -> None:
    with pytest.raises(InvalidJobDefinition, match="lambda"):
        job(lambda: None)


def test_methods_are_refused_at_decoration() -> None:
    source = "class Mailer:\n    @job\n    def send(self): ...\n"
    with pytest.raises(InvalidJobDefinition, match="looks like a method"):
        exec(source, {"job": job, "__name__": __name__})


def test_callables_that_are_not_plain_functions_are_refused() -> None:
    with pytest.raises(InvalidJobDefinition, match="plain module-level function"):
        job(functools.partial(sample_jobs.add.fn, 1))
    with pytest.raises(InvalidJobDefinition, match="already a job"):
        job(sample_jobs.add)


def _module_level_clone(fn: Any, name: str, module: str = __name__) -> Any:
    """A copy of ``fn`` that looks defined at module level under ``name``."""
    clone = type(fn)(fn.__code__, fn.__globals__, name, fn.__defaults__, fn.__closure__)
    clone.__qualname__ = name
    clone.__module__ = module
    return clone


def test_functions_from_main_are_refused_because_workers_cannot_import_them() -> None:
    def script_job() -> None: ...

    with pytest.raises(InvalidJobDefinition, match="__main__"):
        job(_module_level_clone(script_job, "script_job", module="__main__"))


@pytest.mark.parametrize("reserved", ["idempotency_key", "on_duplicate", "delay", "at"])
def test_a_parameter_named_like_a_reserved_option_is_refused(reserved: str) -> None:
    namespace: dict[str, Any] = {}
    exec(f"def clashing({reserved}): ...", namespace)
    with pytest.raises(InvalidJobDefinition, match=f"parameter named '{reserved}'"):
        job(_module_level_clone(namespace["clashing"], "clashing"))


def test_a_positional_only_context_is_refused() -> None:
    namespace: dict[str, Any] = {}
    exec("def positional(context, /): ...", namespace)
    with pytest.raises(InvalidJobDefinition, match="positional-only"):
        job(_module_level_clone(namespace["positional"], "positional"))


def test_an_observer_that_cannot_take_the_dead_job_id_is_refused() -> None:
    def two_args(a: str, b: str) -> None: ...

    with pytest.raises(InvalidJobDefinition, match="only argument"):
        job(failure_observers=[sample_jobs.add])(_module_level_clone(two_args, "two_args"))


def test_an_observer_that_is_neither_a_job_nor_a_target_is_refused() -> None:
    def watched() -> None: ...

    with pytest.raises(InvalidJobDefinition, match="not a job"):
        job(failure_observers=[print])(_module_level_clone(watched, "watched"))  # type: ignore[list-item]
    with pytest.raises(InvalidJobDefinition, match=r"package.module:function"):
        job(failure_observers=["no_colon"])(_module_level_clone(watched, "watched"))


@pytest.mark.parametrize(
    "options",
    [
        {"queue": ""},
        {"priority": "high"},
        {"priority": True},
        {"timeout": timedelta(0)},
        {"retry": "fast"},
    ],
)
def test_bad_decoration_options_are_refused(options: dict[str, Any]) -> None:
    with pytest.raises((TypeError, ValueError)):
        job(**options)


def test_using_layers_call_site_options_over_the_decoration() -> None:
    configured = sample_jobs.send_invoice.using(priority=9).using(idempotency_key="k")
    assert isinstance(configured, ConfiguredJob)
    assert configured.options == JobOptions(priority=9, idempotency_key="k")
    assert configured.definition.options.priority == 5  # the definition is untouched


def test_enqueue_without_a_configured_client_says_how_to_configure_one() -> None:
    previous = set_default_client(None)
    try:
        with pytest.raises(NotConfigured, match="INSTALLED_APPS"):
            sample_jobs.add.enqueue(1, 2)
    finally:
        set_default_client(previous)


def test_the_definition_is_generic_in_the_function_signature() -> None:
    definition: JobDefinition[[int, int], int] = sample_jobs.add
    assert definition(1, 1) == 2
