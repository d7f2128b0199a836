"""The monitoring facts, one module per heading of the facts page.

Sections load only when the whole suite is asked for, so one section can be imported
(and developed) on its own.
"""

from __future__ import annotations

from typing import Any


def _compose() -> type:
    from millrace_django.conformance.monitoring.catalog import (
        CatalogFacts,
        RunTimeFacts,
        TagCatalogFacts,
    )
    from millrace_django.conformance.monitoring.history import AttemptHistoryFacts
    from millrace_django.conformance.monitoring.instances import InstanceQueryFacts
    from millrace_django.conformance.monitoring.job_queries import JobQueryFacts
    from millrace_django.conformance.monitoring.recurring import RecurringQueryFacts
    from millrace_django.conformance.monitoring.statistics import (
        MaintainedCountFacts,
        StatisticsFacts,
    )
    from millrace_django.conformance.monitoring.tags import TagFacts
    from millrace_django.conformance.monitoring.throughput import (
        TargetSearchFacts,
        ThroughputFacts,
    )

    class MonitoringFacts(
        JobQueryFacts,
        StatisticsFacts,
        MaintainedCountFacts,
        AttemptHistoryFacts,
        RecurringQueryFacts,
        InstanceQueryFacts,
        ThroughputFacts,
        TargetSearchFacts,
        TagFacts,
        CatalogFacts,
        RunTimeFacts,
        TagCatalogFacts,
    ):
        """Every fact a :class:`~millrace_django.contract.MonitoringStorage` must hold."""

    return MonitoringFacts


def __getattr__(name: str) -> Any:
    if name == "MonitoringFacts":
        suite = _compose()
        globals()[name] = suite
        return suite
    raise AttributeError(name)


__all__ = ["MonitoringFacts"]
