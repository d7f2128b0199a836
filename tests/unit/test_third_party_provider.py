"""``MILLRACE['STORAGE']`` as the dotted path of a provider factory. The example of
docs/writing-a-storage-provider.md is executed as written: the kit bound to it as the
page shows passes, and a job runs end to end through it. A factory that cannot make a
provider fails the system checks, saying why."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command

from millrace_django import assembly
from millrace_django.checks import check_settings
from millrace_django.conf import InvalidSettings, parse_settings
from millrace_django.contract import JobState
from tests.unit import command_jobs

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "writing-a-storage-provider.md"
FILE_BLOCK = re.compile(r"<!-- file: (\S+) -->\n```python\n(.*?)```", re.DOTALL)
FACTORY = "myproject.storage.make_storage"


def not_a_provider(clock: object, **options: object) -> object:
    return object()


def broken_factory(clock: object, **options: object) -> object:
    raise ConnectionError("the store is unreachable")


@pytest.fixture
def guide_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The guide's files, written where it says, importable."""
    files = dict(FILE_BLOCK.findall(GUIDE.read_text()))
    assert set(files) == {"myproject/storage.py", "tests/test_counting_storage.py"}
    for name, code in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        (path.parent / "__init__.py").touch()
        path.write_text(code)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for module in [name for name in sys.modules if name.split(".")[0] == "myproject"]:
        del sys.modules[module]


@pytest.fixture
def provider_settings(settings: Any) -> Iterator[Any]:
    original = settings.MILLRACE
    yield settings
    settings.MILLRACE = original  # rebuilds the default storage before the next test


def test_the_kit_bound_as_the_guide_shows_passes_against_the_guides_provider(
    guide_project: Path,
) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
        cwd=guide_project,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(guide_project), str(ROOT)])},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    passed = re.search(r"(\d+) passed", result.stdout)
    assert passed is not None and int(passed.group(1)) > 300, result.stdout[-2000:]


@pytest.mark.django_db(transaction=True)
def test_a_job_runs_end_to_end_through_a_provider_named_by_its_dotted_path(
    guide_project: Path, provider_settings: Any
) -> None:
    provider_settings.MILLRACE = {**provider_settings.MILLRACE, "STORAGE": FACTORY}
    # E012 would name the atomic jobs other test modules registered in this process
    # (the guide's provider, wrapping the memory one, cannot run those): not the
    # provider's own doing.
    assert [error for error in check_settings() if error.id != "millrace.E012"] == []
    storage = assembly.storage()
    assert type(storage).__qualname__ == "CountingStorage"

    command_jobs.ran.clear()
    job_id = command_jobs.record.enqueue("through the guide's provider")
    call_command("millrace_worker", "--until-idle", stdout=io.StringIO(), stderr=io.StringIO())

    stored = storage.get_job(job_id)
    assert stored is not None and stored.state is JobState.SUCCEEDED
    assert command_jobs.ran == ["through the guide's provider"]
    command_jobs.ran.clear()
    assert storage.stored == 1  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("factory", "said"),
    [
        ("not_a_provider", "made object, which is not a complete storage provider: it lacks"),
        ("broken_factory", "failed when called as factory(clock, alias=..., statement_timeout"),
    ],
)
def test_a_factory_that_makes_no_provider_fails_the_checks_saying_why(
    provider_settings: Any, factory: str, said: str
) -> None:
    provider_settings.MILLRACE = {**provider_settings.MILLRACE, "STORAGE": f"{__name__}.{factory}"}

    [error] = check_settings()

    assert error.id == "millrace.E013"
    assert said in error.msg
    if factory == "not_a_provider":
        assert "claim" in error.msg and "query_jobs" in error.msg and "get_instance" in error.msg
    else:
        assert "ConnectionError: the store is unreachable" in error.msg


@pytest.mark.parametrize("value", ["nowhere.at_all.factory", f"{__name__}.GUIDE", "redis", 5])
def test_a_storage_that_is_neither_a_provider_nor_an_importable_callable_is_refused(
    value: object,
) -> None:
    with pytest.raises(InvalidSettings) as refused:
        parse_settings({"STORAGE": value})
    [problem] = refused.value.problems
    assert problem.id == "millrace.E003"
    assert "the importable dotted path of a provider factory" in problem.hint
