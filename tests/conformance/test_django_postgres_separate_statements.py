"""The job facts on PostgreSQL as the provider runs them when an alias cannot send two
statements in one message (``OPTIONS["server_side_binding"] = True``): no autocommit
shortcut, a ``set_config`` at the start of each transaction, the acknowledgement's
parent lock as a statement of its own. Bound like ``test_django_postgres``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from unittest import mock

import pytest

from millrace_django.clock import FakeClock
from millrace_django.conformance import JobStorageFacts, StorageHarness
from millrace_django.storage.orm.vendors.postgresql import PostgreSQL
from tests.conformance.django_harness import (
    DjangoHarness,
    DjangoStoreUnderTest,
    server_marks,
)

pytestmark = server_marks("postgres", "MILLRACE_TEST_POSTGRES_URL")


class SeparateStatementsHarness(DjangoHarness):
    @contextmanager
    def open(self, clock: FakeClock) -> Iterator[DjangoStoreUnderTest]:
        vendor = PostgreSQL(client_binding=False)
        with (
            mock.patch("millrace_django.storage.orm.provider.vendor_for", return_value=vendor),
            super().open(clock) as store,
        ):
            yield store


class TestPostgreSQLSeparateStatementsJobStorage(JobStorageFacts):
    @pytest.fixture
    def harness(self) -> StorageHarness:
        return SeparateStatementsHarness("postgres")
