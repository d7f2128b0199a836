"""Folding the maintained counts on the ORM provider, on every database configured:
however many groups hold a single row, each group with several is folded into one."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from django.conf import settings

from millrace_django.clock import FakeClock
from millrace_django.contract import TenantFilter
from millrace_django.models import FinishedMinute, Tally, TallySubject
from millrace_django.models import JobStateCode as Code
from millrace_django.storage.orm import DjangoStorage
from millrace_django.storage.orm.tallies import MinuteKey, TallyKey, record

ALIASES = [alias for alias in ("default", "postgres", "mariadb") if alias in settings.DATABASES]
pytestmark = pytest.mark.django_db(transaction=True, databases=ALIASES)

START = datetime(2026, 12, 1, tzinfo=UTC)


@pytest.fixture(params=ALIASES)
def alias(request: pytest.FixtureRequest) -> Iterator[str]:
    yield request.param
    Tally.objects.using(request.param).all().delete()
    FinishedMinute.objects.using(request.param).all().delete()


def test_a_group_is_folded_however_many_single_row_groups_come_before_it(alias: str) -> None:
    """A fold looks at groups, not at the oldest rows: a day's worth of finished minutes
    (one row each, as every minute ends) ahead of a group with several rows does not hold
    that group back, as a window over the oldest rows did."""
    storage = DjangoStorage(alias, FakeClock(START))
    singles = Counter(
        {MinuteKey(START + timedelta(minutes=m), Code.SUCCEEDED): 1 for m in range(60)}
    )
    record(alias, singles)
    late = MinuteKey(START + timedelta(hours=2), Code.SUCCEEDED)
    for _ in range(3):
        record(alias, {late: 2})
    assert FinishedMinute.objects.using(alias).count() == 63

    assert storage.fold_statistics(10) == 3

    assert FinishedMinute.objects.using(alias).count() == 61
    (point,) = storage.get_throughput(late.minute, late.minute + timedelta(minutes=1))
    assert point.succeeded == 6


def test_folding_keeps_the_tenants_and_spellings_of_targets_apart(alias: str) -> None:
    """Groups differ by tenant (the null tenant being one) and by the target's exact
    spelling; folding sums each on its own."""
    storage = DjangoStorage(alias, FakeClock(START))
    keys = [
        TallyKey(TallySubject.JOB, Code.SUCCEEDED, "q", "mod:Send", None),
        TallyKey(TallySubject.JOB, Code.SUCCEEDED, "q", "mod:send", None),
        TallyKey(TallySubject.JOB, Code.SUCCEEDED, "q", "mod:send", "acme"),
    ]
    for _ in range(2):
        record(alias, dict.fromkeys(keys, 1))

    assert storage.fold_statistics(10) == 6

    stored = Counter(
        {
            (row.target, row.tenant_id): row.n
            for row in Tally.objects.using(alias).order_by("target", "tenant_id")
        }
    )
    assert stored == {("mod:Send", None): 2, ("mod:send", None): 2, ("mod:send", "acme"): 2}
    succeeded = storage.get_statistics(TenantFilter.of("acme")).jobs_by_state
    assert succeeded[next(s for s in succeeded if s.value == "succeeded")] == 2
