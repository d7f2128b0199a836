"""Binds the conformance kit to :class:`DjangoStorage` on one database alias.

Each fact gets a storage on the alias's (pytest-django) test database with empty
millrace tables, and leaves them empty. Racer threads close their own connections.
A vendor's binding module subclasses :class:`DjangoBinding` and takes its marks from
:func:`server_marks`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import ClassVar

import pytest
from django.conf import settings
from django.db import connections

from millrace_django.clock import FakeClock
from millrace_django.conformance import StorageHarness
from millrace_django.models import (
    Bookmark,
    Job,
    JobAttempt,
    JobLog,
    PausedQueue,
    Recurring,
    Worker,
    WorkflowInstance,
)
from millrace_django.storage.orm import DjangoStorage

_TABLES = (JobAttempt, JobLog, Job, Recurring, WorkflowInstance, Bookmark, PausedQueue, Worker)


class DjangoStoreUnderTest:
    """The kit's view of one :class:`DjangoStorage`."""

    def __init__(self, storage: DjangoStorage) -> None:
        self.jobs = self.workflows = self.monitoring = storage
        self._alias = storage.alias

    def end_thread(self) -> None:
        """Close the calling thread's connection (each thread opens its own)."""
        connections[self._alias].close()


class DjangoHarness:
    """Opens a :class:`DjangoStorage` on ``alias`` with empty millrace tables."""

    def __init__(self, alias: str) -> None:
        self.alias = alias

    @contextmanager
    def open(self, clock: FakeClock) -> Iterator[DjangoStoreUnderTest]:
        self._empty()
        try:
            yield DjangoStoreUnderTest(DjangoStorage(self.alias, clock))
        finally:
            self._empty()

    def _empty(self) -> None:
        for model in _TABLES:
            model.objects.using(self.alias).all().delete()


def require_alias(alias: str, variable: str) -> None:
    """Skip the calling test module when ``alias`` is not configured, unless running in
    CI, where a missing database must fail rather than skip silently."""
    if alias in settings.DATABASES:
        return
    reason = f"{variable} is not set, so the {alias!r} database is not configured"
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (CI must run against every database)", pytrace=False)
    pytest.skip(f"{reason} (scripts/testdb.sh starts one)", allow_module_level=True)


def server_marks(
    alias: str, variable: str, *, with_default: bool = False
) -> list[pytest.MarkDecorator]:
    """The ``pytestmark`` of a module binding the kit to the database server on ``alias``:
    the marker named after the alias and a transactional test database (and the
    ``default`` one ``with_default``, for users and sessions). Skips the module when
    ``variable`` left ``alias`` unconfigured (fails in CI, see :func:`require_alias`)."""
    require_alias(alias, variable)
    databases = ["default", alias] if with_default else [alias]
    return [
        getattr(pytest.mark, alias),
        pytest.mark.django_db(transaction=True, databases=databases),
    ]


class DjangoBinding:
    """Binds the kit's suites to :class:`DjangoStorage` on the database alias ``alias``."""

    alias: ClassVar[str]

    @pytest.fixture
    def harness(self) -> StorageHarness:
        return DjangoHarness(self.alias)
