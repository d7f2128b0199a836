"""Calibration against real databases: each server's clock is read, the offset measured on
this machine is about zero, a skewed node's corrected clock lands on the database's time,
and a corrected node cannot reclaim a live lease that an uncorrected one steals. Also the
settings that turn it on, off, and point it at another clock."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.core.management import call_command

from millrace_django import assembly
from millrace_django.checks import check_settings
from millrace_django.clock import CorrectedClock, DatabaseTime, FakeClock, SystemClock
from millrace_django.conf import InvalidSettings, parse_settings
from millrace_django.conformance.support import make_job
from millrace_django.contract import ClaimRequest
from millrace_django.models import Job
from millrace_django.runtime import ClockSync, measure_offset
from millrace_django.storage.memory import MemoryStorage
from millrace_django.storage.orm import DjangoStorage
from tests.reliability.skewed_clocks import SkewedClock

SERVERS = [alias for alias in ("postgres", "mariadb") if alias in django_settings.DATABASES]
ALIASES = ["default", *SERVERS]
pytestmark = pytest.mark.django_db(transaction=True, databases=ALIASES)

SAME_MACHINE = timedelta(milliseconds=50)
"""How far apart this machine's clock and a server's on it may be measured: the true
offset is zero, the error at most half a round trip (generous, for a loaded machine)."""

LEASE = timedelta(seconds=20)


@pytest.fixture(params=SERVERS)
def server(request: pytest.FixtureRequest) -> Iterator[str]:
    yield request.param
    Job.objects.using(request.param).all().delete()


def test_each_server_reads_its_clock_in_aware_utc(server: str) -> None:
    storage = DjangoStorage(server, FakeClock())
    before = datetime.now(UTC)
    read = storage.database_time()
    after = datetime.now(UTC)

    assert isinstance(storage, DatabaseTime)
    assert read is not None and read.tzinfo is UTC
    assert before - SAME_MACHINE <= read <= after + SAME_MACHINE


def test_sqlite_runs_on_this_machines_clock() -> None:
    storage = DjangoStorage("default", FakeClock())
    sync = ClockSync(CorrectedClock(SystemClock()), storage, warn_beyond=timedelta(seconds=1))

    assert storage.database_time() is None
    assert sync.sync() is None and sync.shared_clock


def test_the_offset_to_a_server_on_this_machine_is_about_zero(server: str) -> None:
    measured = measure_offset(SystemClock(), DjangoStorage(server, SystemClock()), samples=5)

    assert measured is not None
    assert abs(measured.offset) <= SAME_MACHINE
    assert measured.round_trip <= 2 * SAME_MACHINE


@pytest.mark.parametrize("skew", [timedelta(seconds=30), timedelta(seconds=-30)])
def test_a_skewed_clock_is_corrected_onto_the_database_time(
    server: str, skew: timedelta, caplog: pytest.LogCaptureFixture
) -> None:
    corrected = CorrectedClock(SkewedClock(skew))
    storage = DjangoStorage(server, corrected)
    sync = ClockSync(corrected, storage, warn_beyond=timedelta(seconds=1))
    assert abs(corrected.now() - _database_now(storage)) >= skew - SAME_MACHINE

    with caplog.at_level(logging.WARNING, "millrace_django"):
        measured = sync.sync()

    assert measured is not None
    assert abs(measured.offset + skew) <= SAME_MACHINE
    assert abs(corrected.now() - _database_now(storage)) <= SAME_MACHINE
    side = "ahead of" if skew > timedelta(0) else "behind"
    said = re.search(rf"clock is ([0-9.]+) s {side} the database's", caplog.text)
    assert said is not None, caplog.text
    assert abs(float(said.group(1)) - abs(skew).total_seconds()) <= SAME_MACHINE.total_seconds()


def _database_now(storage: DjangoStorage) -> datetime:
    read = storage.database_time()
    assert read is not None
    return read


@pytest.mark.parametrize("calibrated", [True, False], ids=["calibrated", "uncalibrated"])
def test_a_node_thirty_seconds_fast_reclaims_a_live_lease_only_uncalibrated(
    server: str, calibrated: bool
) -> None:
    healthy = DjangoStorage(server, SystemClock())
    (job_id,) = healthy.enqueue([make_job(FakeClock())])
    (claimed,) = healthy.claim(_claim("healthy"))
    assert claimed.id == job_id

    fast_clock = CorrectedClock(SkewedClock(timedelta(seconds=30)))
    fast = DjangoStorage(server, fast_clock)
    if calibrated:
        ClockSync(fast_clock, fast, warn_beyond=timedelta(minutes=1)).sync()

    stolen = fast.claim(_claim("fast"))

    # The lease has 20 s to run: only a clock read 30 s fast sees it lapsed.
    assert [job.id for job in stolen] == ([] if calibrated else [job_id])


def _claim(worker_id: str) -> ClaimRequest:
    return ClaimRequest(
        worker_id=worker_id, queues=frozenset({"default"}), max_count=10, lease=LEASE
    )


# -- settings and wiring ----------------------------------------------------------------


def test_the_clock_is_corrected_and_calibrated_by_default(settings: Any) -> None:
    settings.MILLRACE = {"DATABASE": SERVERS[0] if SERVERS else "default"}
    parsed = parse_settings(settings.MILLRACE, settings.DATABASES.keys())

    assert (parsed.clock, parsed.clock_sync) == ("millrace_django.clock.SystemClock", True)
    assert parsed.clock_skew_warning == timedelta(seconds=1)
    assert isinstance(assembly.clock(), CorrectedClock)
    sync = assembly.clock_sync()
    assert sync is not None and sync.clock is assembly.clock()


def test_clock_sync_off_leaves_the_source_clock_alone(settings: Any) -> None:
    settings.MILLRACE = {"CLOCK_SYNC": False}

    assert type(assembly.clock()) is SystemClock
    assert assembly.clock_sync() is None


def test_the_memory_storage_has_nothing_to_calibrate_to(settings: Any) -> None:
    settings.MILLRACE = {"STORAGE": "memory"}

    assert isinstance(assembly.storage(), MemoryStorage)
    assert assembly.clock_sync() is None


def test_the_clock_setting_names_the_source_clock(settings: Any) -> None:
    settings.MILLRACE = {
        "CLOCK": "tests.reliability.skewed_clocks.an_hour_ahead",
        "CLOCK_SKEW_WARNING": 30,
    }

    clock = assembly.clock()
    assert isinstance(clock, CorrectedClock) and isinstance(clock.source, SkewedClock)
    assert clock.source.skew == timedelta(hours=1)
    sync = assembly.clock_sync()
    assert sync is not None


@pytest.mark.parametrize(
    ("key", "value", "expected"),
    [
        ("CLOCK", "millrace_django.clock.NoSuchClock", "importable dotted path"),
        ("CLOCK", 42, "importable dotted path"),
        ("CLOCK", "millrace_django.assembly.__doc__", "is not callable"),
        ("CLOCK_SYNC", "yes", "True or False"),
        ("CLOCK_SKEW_WARNING", 0, "a positive duration"),
    ],
)
def test_bad_clock_settings_fail_the_check_with_a_hint(
    settings: Any, key: str, value: object, expected: str
) -> None:
    settings.MILLRACE = {key: value}
    with pytest.raises(InvalidSettings) as raised:
        parse_settings(settings.MILLRACE)
    (problem,) = raised.value.problems
    assert problem.id == "millrace.E003" and expected in problem.hint
    assert [error.id for error in check_settings()] == ["millrace.E003"]


def test_the_scheduler_command_calibrates_before_its_pass(
    server: str, settings: Any, caplog: pytest.LogCaptureFixture
) -> None:
    settings.MILLRACE = {
        "DATABASE": server,
        "CLOCK": "tests.reliability.skewed_clocks.an_hour_behind",
    }
    with caplog.at_level(logging.WARNING, "millrace_django"):
        call_command("millrace_scheduler", "--once", verbosity=0)

    assert "3600.0" in caplog.text and "behind the database's" in caplog.text
    sync = assembly.clock_sync()
    assert sync is not None and sync.latest is not None
    assert abs(sync.latest.offset - timedelta(hours=1)) <= SAME_MACHINE
