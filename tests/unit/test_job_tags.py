"""Tags from ``@job``/``using`` to the stored job: checked where they are given (type,
count, length, characters), sorted and deduplicated, read back by ``jobs.get`` on SQLite
and PostgreSQL, kept by a requeue."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings as django_settings

from millrace_django import job, jobs
from millrace_django.contract import MAX_TAG_LENGTH, MAX_TAGS, tags_of
from millrace_django.testing import JobRunner, project_runner

ALIASES = ["default", *[alias for alias in ("postgres",) if alias in django_settings.DATABASES]]


@job(tags=["reports", "eu"])
def monthly_report(month: str) -> str:
    return month


@pytest.mark.parametrize(
    ("tags", "error", "message"),
    [
        ("billing", TypeError, "list of strings"),
        (5, TypeError, "list of strings"),
        ([3], TypeError, "a tag must be a string"),
        ([""], ValueError, f"1 to {MAX_TAG_LENGTH} characters"),
        (["x" * (MAX_TAG_LENGTH + 1)], ValueError, f"1 to {MAX_TAG_LENGTH} characters"),
        (["two words"], ValueError, "letters, digits and _ - . : only"),
        (["café"], ValueError, "letters, digits and _ - . : only"),
        ([f"t{n}" for n in range(MAX_TAGS + 1)], ValueError, f"at most {MAX_TAGS} tags"),
    ],
)
def test_malformed_tags_are_refused_where_they_are_given(
    tags: Any, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        monthly_report.using(tags=tags)
    with pytest.raises(error, match=message):
        job(tags=tags)


def test_tags_are_sorted_and_deduplicated() -> None:
    assert tags_of(["b", "a:1", "b", "A-x.y_z"]) == ("A-x.y_z", "a:1", "b")


@pytest.fixture(params=ALIASES)
def runner(request: pytest.FixtureRequest, settings: Any) -> Iterator[JobRunner]:
    if request.param != "default":
        settings.MILLRACE = {**settings.MILLRACE, "DATABASE": request.param}
    with project_runner(storage="orm") as installed:
        yield installed


@pytest.mark.django_db(databases=ALIASES)
def test_a_jobs_tags_are_read_back_and_using_replaces_the_decorators(runner: JobRunner) -> None:
    decorated = monthly_report.enqueue("2026-11")
    replaced = monthly_report.using(tags=["adhoc"]).enqueue("2026-12")
    untagged = monthly_report.using(tags=[]).enqueue("2027-01")

    assert jobs.get(decorated).tags == ("eu", "reports")
    assert jobs.get(replaced).tags == ("adhoc",)
    assert jobs.get(untagged).tags == ()


@pytest.mark.django_db(databases=ALIASES)
def test_a_requeued_copy_keeps_the_tags(runner: JobRunner) -> None:
    original = monthly_report.enqueue("2026-11")
    runner.run_until_idle()

    copy = jobs.requeue(original)

    assert copy is not None and jobs.get(copy).tags == ("eu", "reports")
