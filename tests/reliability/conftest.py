"""Fixtures of the reliability scenarios: a :class:`Rig` on this run's PostgreSQL test
database (``MILLRACE_TEST_POSTGRES_URL``; skipped when unset, except in CI), and a
client that enqueues into it as an application would."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from django.db import connections

from millrace_django.clock import SystemClock
from millrace_django.engine import EngineSettings, JobClient, Retry
from millrace_django.storage.orm import DjangoStorage
from tests.reliability.harness.rig import Rig, url_of

ALIAS = "postgres"
QUEUES = ("default", "suspect")


@pytest.fixture
def client() -> JobClient:
    clock = SystemClock()
    config = EngineSettings(queues=frozenset(QUEUES), default_retry=Retry.none())
    return JobClient(DjangoStorage(ALIAS, clock), clock, config)


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    """Needs the module to declare ``django_db(transaction=True, databases=["postgres"])``."""
    opened = Rig.open(url_of(ALIAS), tmp_path)
    yield opened
    opened.close()  # before the test database is emptied
    connections[ALIAS].close()
