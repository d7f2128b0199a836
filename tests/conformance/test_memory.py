"""The whole kit, bound to the in-memory provider."""

from __future__ import annotations

import pytest

from millrace_django.conformance import (
    JobStorageFacts,
    MonitoringFacts,
    StorageHarness,
    WorkflowStorageFacts,
)
from millrace_django.storage.memory import MemoryHarness


class MemoryBinding:
    @pytest.fixture
    def harness(self) -> StorageHarness:
        return MemoryHarness()


class TestMemoryJobStorage(MemoryBinding, JobStorageFacts):
    pass


class TestMemoryWorkflowStorage(MemoryBinding, WorkflowStorageFacts):
    pass


class TestMemoryMonitoring(MemoryBinding, MonitoringFacts):
    pass
