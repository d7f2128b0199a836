from __future__ import annotations

from collections.abc import Iterator

import pytest

from millrace_django.engine import EngineSettings, Retry
from millrace_django.engine.workflow import WorkflowClient
from millrace_django.testing import JobRunner
from tests.unit.workflow import flows


@pytest.fixture(autouse=True)
def clean_flows() -> Iterator[None]:
    flows.reset()
    yield
    flows.reset()


@pytest.fixture
def runner() -> JobRunner:
    """A runner over memory storage; jobs get no retries unless their step says so."""
    return JobRunner(
        config=EngineSettings(queues=frozenset({"default", "side"}), default_retry=Retry.none())
    )


@pytest.fixture
def workflows(runner: JobRunner) -> WorkflowClient:
    return runner.workflows
