"""Calibrating a node's clock to the database's, in fake time: the offset math (NTP's
minimum-round-trip estimate), its pacing, and where the worker and scheduler use it."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import datetime, timedelta

import pytest

from millrace_django.clock import CorrectedClock, DatabaseTime, FakeClock
from millrace_django.contract import ClaimRequest, JobRecord
from millrace_django.runtime import ClockSync, RuntimeSettings, Scheduler, Worker, measure_offset
from millrace_django.runtime.clock_sync import RETRY_AFTER_FAILURE, STEP
from millrace_django.storage.memory import MemoryStorage
from tests.unit.runtime.helpers import WorkerThread, wait_until

MS = timedelta(milliseconds=1)
SKEW = timedelta(seconds=30)


class FakeDatabase:
    """A database whose clock reads ``skew`` past ``local``; each read takes the next
    ``(out, back)`` legs of ``legs`` on ``local`` (the request's and the answer's)."""

    def __init__(
        self, local: FakeClock, skew: timedelta, legs: list[tuple[timedelta, timedelta]]
    ) -> None:
        self.local = local
        self.skew = skew
        self.legs = list(legs)
        self.reads = 0
        self.failing = False

    def database_time(self) -> datetime:
        self.reads += 1
        if self.failing:
            raise ConnectionError("the database is down")
        out, back = self.legs.pop(0) if self.legs else (MS, MS)
        self.local.advance(out)
        read = self.local.now() + self.skew
        self.local.advance(back)
        return read


class LocalDatabase:
    """A database on this machine's clock (SQLite)."""

    def __init__(self) -> None:
        self.reads = 0

    def database_time(self) -> None:
        self.reads += 1


class Ticks:
    """A monotonic clock that runs with the fake clock ``local``."""

    def __init__(self, local: FakeClock) -> None:
        self.local = local
        self.start = local.now()

    def __call__(self) -> float:
        return (self.local.now() - self.start).total_seconds()


class MachineClock:
    """A machine's clock on fake time, which an administrator may set (``step``)."""

    def __init__(self, local: FakeClock) -> None:
        self.local = local
        self.step = timedelta(0)

    def now(self) -> datetime:
        return self.local.now() + self.step


@pytest.fixture
def local() -> FakeClock:
    return FakeClock()


@pytest.fixture
def ticks(local: FakeClock) -> Ticks:
    return Ticks(local)


def test_the_fakes_are_database_clocks(local: FakeClock) -> None:
    assert isinstance(FakeDatabase(local, SKEW, []), DatabaseTime)
    assert isinstance(LocalDatabase(), DatabaseTime)


def test_symmetric_legs_give_the_exact_offset_and_round_trip(local: FakeClock) -> None:
    database = FakeDatabase(local, SKEW, [(3 * MS, 3 * MS)])

    measured = measure_offset(local, database, samples=1)

    assert measured is not None
    assert (measured.offset, measured.round_trip) == (SKEW, 6 * MS)
    assert measured.measured_at == local.now() - 3 * MS + SKEW


@pytest.mark.parametrize("skew", [SKEW, -SKEW, timedelta(hours=-1), timedelta(0)])
def test_the_quickest_of_several_round_trips_is_kept(local: FakeClock, skew: timedelta) -> None:
    # The slow reads are lopsided (a delay on one leg only); the quick one is not.
    legs = [(40 * MS, 2 * MS), (2 * MS, 30 * MS), (MS, MS), (9 * MS, MS), (5 * MS, 5 * MS)]
    database = FakeDatabase(local, skew, legs)

    measured = measure_offset(local, database, samples=5)

    assert measured is not None
    assert (measured.offset, measured.round_trip) == (skew, 2 * MS)
    assert database.reads == 5


def test_a_lopsided_read_errs_by_at_most_half_its_round_trip(local: FakeClock) -> None:
    database = FakeDatabase(local, SKEW, [(7 * MS, MS)])

    measured = measure_offset(local, database, samples=1)

    assert measured is not None
    assert measured.offset - SKEW == 3 * MS  # read 3 ms after the assumed mid-point
    assert abs(measured.offset - SKEW) <= measured.round_trip / 2


def test_a_sample_during_which_the_clock_stepped_back_is_ignored(local: FakeClock) -> None:
    stepping = CorrectedClock(local)

    class SteppingDatabase:
        def __init__(self) -> None:
            self.legs = [timedelta(seconds=-5), timedelta(0)]  # the clock steps back once

        def database_time(self) -> datetime:
            stepping.set_offset(stepping.offset + self.legs.pop(0))
            local.advance(2 * MS)
            return local.now() + SKEW

    measured = measure_offset(stepping, SteppingDatabase(), samples=2)

    assert measured is not None
    assert measured.round_trip == 2 * MS
    assert measured.offset == SKEW + timedelta(seconds=5) + MS  # read at the end of the trip


def test_a_clock_stepping_back_in_every_sample_is_an_error(local: FakeClock) -> None:
    stepping = CorrectedClock(local)

    class AlwaysStepping:
        def database_time(self) -> datetime:
            stepping.set_offset(stepping.offset - timedelta(seconds=1))
            return local.now()

    with pytest.raises(RuntimeError, match="stepped back"):
        measure_offset(stepping, AlwaysStepping(), samples=3)


def test_a_database_on_this_machines_clock_has_no_offset(local: FakeClock) -> None:
    database = LocalDatabase()
    assert measure_offset(local, database, samples=5) is None
    assert database.reads == 1


def test_no_samples_is_refused(local: FakeClock) -> None:
    with pytest.raises(ValueError, match="samples"):
        measure_offset(local, LocalDatabase(), samples=0)


def test_a_sync_corrects_the_clock_to_the_database_time(local: FakeClock) -> None:
    corrected = CorrectedClock(local)
    database = FakeDatabase(local, -SKEW, [(MS, MS)] * 5)
    sync = ClockSync(corrected, database, warn_beyond=timedelta(minutes=1))
    assert corrected.now() == local.now()  # no offset before the first measurement

    measured = sync.sync()

    assert measured is not None and sync.latest == measured
    assert corrected.offset == -SKEW
    assert corrected.now() == local.now() - SKEW == database.database_time() - MS


def test_an_offset_beyond_the_threshold_is_a_warning_and_still_corrected(
    local: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    corrected = CorrectedClock(local)
    database = FakeDatabase(local, timedelta(hours=-1), [])
    sync = ClockSync(corrected, database, warn_beyond=timedelta(seconds=1))

    with caplog.at_level(logging.INFO, "millrace_django"):
        sync.sync()

    assert corrected.offset == timedelta(hours=-1)
    (record,) = caplog.records
    assert record.levelno == logging.WARNING
    assert "3600.000 s ahead of the database's" in record.getMessage()


def test_an_offset_within_the_threshold_is_reported_once_at_info(
    local: FakeClock, caplog: pytest.LogCaptureFixture
) -> None:
    sync = ClockSync(
        CorrectedClock(local), FakeDatabase(local, 4 * MS, []), warn_beyond=timedelta(seconds=1)
    )

    with caplog.at_level(logging.DEBUG, "millrace_django"):
        sync.sync()
        sync.sync()

    assert [(r.levelno, r.getMessage()) for r in caplog.records] == [
        (logging.INFO, "clock offset to the database: +4.000 ms (measured to within 1.000 ms)"),
        (logging.DEBUG, "clock offset to the database: +4.000 ms (measured to within 1.000 ms)"),
    ]


def test_measurements_repeat_every_interval_and_sooner_after_a_failure(
    local: FakeClock, ticks: Ticks, caplog: pytest.LogCaptureFixture
) -> None:
    corrected = CorrectedClock(local)
    database = FakeDatabase(local, SKEW, [])
    sync = ClockSync(
        corrected,
        database,
        warn_beyond=timedelta(minutes=1),
        interval=timedelta(seconds=60),
        samples=3,
        monotonic=ticks,
    )
    assert sync.due()
    sync.sync_if_due()
    assert (database.reads, corrected.offset) == (3, SKEW)

    local.advance(timedelta(seconds=59.9))
    sync.sync_if_due()
    assert database.reads == 3  # not due yet

    local.advance(timedelta(seconds=0.1))
    database.failing = True
    with caplog.at_level(logging.WARNING, "millrace_django"):
        sync.sync_if_due()  # fails: logged, the offset in force stays
    assert (database.reads, corrected.offset) == (4, SKEW)
    assert "cannot measure this node's clock offset" in caplog.text

    local.advance(RETRY_AFTER_FAILURE - timedelta(seconds=0.1))
    assert not sync.due()
    local.advance(timedelta(seconds=0.1))
    database.failing = False
    database.skew = 2 * SKEW
    sync.sync_if_due()
    assert (database.reads, corrected.offset) == (7, 2 * SKEW)


def test_a_clock_stepped_between_measurements_is_measured_again_at_once(
    local: FakeClock, ticks: Ticks
) -> None:
    machine = MachineClock(local)
    corrected = CorrectedClock(machine)
    database = FakeDatabase(local, timedelta(0), [])  # the database keeps the true time
    sync = ClockSync(corrected, database, warn_beyond=timedelta(hours=2), monotonic=ticks)
    sync.sync()
    local.advance(timedelta(seconds=10))
    machine.step = STEP  # as much as a time service slews in half an hour: no step
    assert not sync.due()

    machine.step = timedelta(hours=1)  # set an hour ahead by hand
    assert sync.due()
    sync.sync_if_due()

    assert corrected.offset == timedelta(hours=-1)
    assert corrected.now() == local.now()
    assert not sync.due()


def test_a_failed_explicit_sync_raises_and_keeps_the_offset(local: FakeClock) -> None:
    corrected = CorrectedClock(local, SKEW)
    database = FakeDatabase(local, SKEW, [])
    database.failing = True
    sync = ClockSync(corrected, database, warn_beyond=timedelta(seconds=1))

    with pytest.raises(ConnectionError):
        sync.sync()

    assert (corrected.offset, sync.latest) == (SKEW, None)


def test_a_database_on_this_machines_clock_is_asked_once(local: FakeClock, ticks: Ticks) -> None:
    database = LocalDatabase()
    sync = ClockSync(
        CorrectedClock(local), database, warn_beyond=timedelta(seconds=1), monotonic=ticks
    )

    sync.sync_if_due()
    local.advance(timedelta(hours=1))
    sync.sync_if_due()

    assert (database.reads, sync.shared_clock, sync.due(), sync.latest) == (1, True, False, None)


def test_bad_pacing_is_refused(local: FakeClock) -> None:
    database = LocalDatabase()
    with pytest.raises(ValueError, match="interval"):
        ClockSync(CorrectedClock(local), database, warn_beyond=MS, interval=timedelta(0))
    with pytest.raises(ValueError, match="samples"):
        ClockSync(CorrectedClock(local), database, warn_beyond=MS, samples=0)


def test_the_skew_warning_threshold_must_be_positive() -> None:
    with pytest.raises(ValueError, match="clock_skew_warning"):
        RuntimeSettings(clock_skew_warning=timedelta(0))


# -- where the runtime calibrates ---------------------------------------------------------


@pytest.fixture
def settings() -> RuntimeSettings:
    fast = timedelta(milliseconds=5)
    return RuntimeSettings(
        lease=timedelta(seconds=30),
        heartbeat=timedelta(seconds=10),
        poll_min=fast,
        poll_max=4 * fast,
        scheduler_interval=fast,
    )


@pytest.fixture
def worker_threads() -> Iterator[list[WorkerThread]]:
    threads: list[WorkerThread] = []
    yield threads
    for thread in threads:
        thread.close()


class CalibrationAtClaims(MemoryStorage):
    """Notes, at each claim, whether ``sync`` had measured the offset yet."""

    def __init__(self, clock: FakeClock, sync: ClockSync) -> None:
        super().__init__(clock)
        self.sync = sync
        self.calibrated: list[bool] = []

    def claim(self, request: ClaimRequest) -> list[JobRecord]:
        self.calibrated.append(self.sync.latest is not None)
        return super().claim(request)


def test_a_worker_calibrates_before_it_claims(local: FakeClock, settings: RuntimeSettings) -> None:
    corrected = CorrectedClock(local)
    sync = ClockSync(corrected, FakeDatabase(local, -SKEW, []), warn_beyond=timedelta(minutes=1))
    storage = CalibrationAtClaims(local, sync)

    Worker(storage, corrected, settings, clock_sync=sync).run(until_idle=True)

    assert storage.calibrated and all(storage.calibrated)
    assert corrected.offset == -SKEW


def test_a_scheduler_pass_calibrates_when_due(
    local: FakeClock, ticks: Ticks, settings: RuntimeSettings
) -> None:
    corrected = CorrectedClock(local)
    database = FakeDatabase(local, SKEW, [])
    sync = ClockSync(
        corrected, database, warn_beyond=timedelta(minutes=1), samples=2, monotonic=ticks
    )
    scheduler = Scheduler(MemoryStorage(local), corrected, settings, clock_sync=sync)

    scheduler.run_once()
    scheduler.run_once()  # within the interval: not measured again

    assert (database.reads, corrected.offset) == (2, SKEW)


def test_a_clock_stepped_far_back_does_not_stall_the_heartbeat(
    local: FakeClock, settings: RuntimeSettings, worker_threads: list[WorkerThread]
) -> None:
    corrected = CorrectedClock(local)
    worker = Worker(MemoryStorage(local), corrected, settings, tick=timedelta(milliseconds=5))
    worker_threads.append(WorkerThread(worker).start())
    wait_until(lambda: worker.stats.empty_claims, "the worker to run")
    assert worker.stats.heartbeats == 0

    corrected.set_offset(timedelta(hours=-1))  # e.g. the first calibration of a fast clock

    # Fake time stands still: only the step itself can make the worker beat.
    wait_until(lambda: worker.stats.heartbeats == 1, "a heartbeat right after the step")
