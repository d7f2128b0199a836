"""What the management commands share: settings, connection hygiene, logging, signals.

The commands stay thin: the runtime's :class:`~millrace_django.runtime.Worker` and
:class:`~millrace_django.runtime.Scheduler` do the work; this module adapts them to
Django (its connections, its settings, its command errors).
"""

from __future__ import annotations

import logging
import re
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from time import monotonic

from django.core.management.base import CommandError
from django.db import connections

from millrace_django import assembly
from millrace_django.conf import InvalidSettings, MillraceSettings, get_settings
from millrace_django.observability import JobLogFilter
from millrace_django.runtime import ClockSync, Hooks, handle_stop_signals

LOGGER_NAME = "millrace_django"
_LOG_FORMAT = "%(asctime)s %(levelname)s [%(process)d] %(name)s: %(message)s"
_JOB_LOG_FORMAT = (
    "%(asctime)s %(levelname)s [%(process)d job %(millrace_job_id)s] %(name)s: %(message)s"
)
_VERBOSITY_LEVELS = {0: logging.WARNING, 1: logging.INFO, 2: logging.INFO, 3: logging.DEBUG}


def load_settings() -> MillraceSettings:
    """The validated ``MILLRACE`` settings, or a :class:`CommandError` listing the problems
    (the system checks say the same, with hints, unless ``--skip-checks`` skipped them)."""
    try:
        return get_settings()
    except InvalidSettings as invalid:
        raise CommandError(f"invalid MILLRACE settings: {invalid}") from invalid


def parse_queues(values: Iterable[str] | None, settings: MillraceSettings) -> frozenset[str] | None:
    """Queue names from ``--queues`` (comma-separated, repeatable); ``None`` when not given
    (every configured queue). An unknown or blank name is a :class:`CommandError`."""
    if not values:
        return None
    names = [name.strip() for value in values for name in value.split(",")]
    if any(not name for name in names):
        raise CommandError(
            "--queues takes comma-separated queue names, e.g. --queues emails,default"
        )
    configured = ", ".join(sorted(settings.queues))
    for name in names:
        if name not in settings.queues:
            raise CommandError(
                f"unknown queue {name!r} in --queues; the configured queues are: {configured} "
                "(MILLRACE['QUEUES'])"
            )
    return frozenset(names)


def positive(option: str, value: int | None) -> int | None:
    """``value`` unless it is below 1 (a :class:`CommandError` naming ``option``)."""
    if value is not None and value < 1:
        raise CommandError(f"{option} must be at least 1; got {value}")
    return value


_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$")
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}


def parse_duration(option: str, text: str) -> timedelta:
    """``"30d"``, ``"12h"``, ``"90m"``, ``"45s"``, ``"2w"`` or a number of seconds."""
    match = _DURATION.match(text)
    if match is None or float(match.group(1)) <= 0:
        raise CommandError(
            f"{option} takes a positive duration such as 30d, 12h, 90m, 45s or 2w; got {text!r}"
        )
    return timedelta(seconds=float(match.group(1)) * _UNITS[match.group(2)])


def duration_text(duration: timedelta) -> str:
    """``duration`` as :func:`parse_duration` reads it back, to the microsecond (never in
    exponent notation, which it does not read)."""
    return f"{duration.total_seconds():f}s"


# -- connection hygiene -----------------------------------------------------------------


BACK_TO_BACK = 0.05
"""Seconds after a job's closing check within which the next job on the same thread
starts without checking again: nothing ran on the thread in between."""

_checked = threading.local()


class fresh_connections:
    """Around one job, on its thread: Django's request rules (``close_old_connections``
    before and after), so a job never inherits a broken connection or keeps one past
    ``CONN_MAX_AGE``; a job that follows another on its thread at once shares that one's
    closing check. (A class, not a generator: it is entered around every job.)"""

    __slots__ = ()

    def __enter__(self) -> None:
        if monotonic() - getattr(_checked, "at", -BACK_TO_BACK) >= BACK_TO_BACK:
            _close_old_connections()

    def __exit__(self, *exc_info: object) -> None:
        _close_old_connections()
        _checked.at = monotonic()


def _close_old_connections() -> None:
    """``close_old_connections`` for this thread, without finding its connections again
    each time: Django keeps a thread's connection objects (one per alias) for the life
    of the thread, closing one only ends its database session, and finding them (a
    thread-critical ``Local``) costs more than checking them."""
    own = getattr(_checked, "connections", None)
    if own is None:
        own = _checked.connections = connections.all()
    for connection in own:
        connection.close_if_unusable_or_obsolete()


def _tidy_runtime_connections() -> None:
    for connection in connections.all(initialized_only=True):
        if connection.in_atomic_block:
            continue  # not ours to close (a caller's transaction)
        if connection.settings_dict.get("CONN_MAX_AGE") == 0:
            # The runtime's own loop threads talk to the database many times a second;
            # reconnecting at every turn would dominate their cost. They keep the
            # connection between turns and drop it once it breaks (a positive
            # CONN_MAX_AGE still caps its age).
            connection.close_at = None
        connection.close_if_unusable_or_obsolete()


@contextmanager
def tidy_connections() -> Iterator[None]:
    """Around one turn of a runtime loop (claim, heartbeat, acknowledgement, scheduler
    pass), on that loop's thread: close the thread's connections that broke or outlived
    a positive ``CONN_MAX_AGE``; keep healthy ones."""
    _tidy_runtime_connections()
    try:
        yield
    finally:
        _tidy_runtime_connections()


def close_connections() -> None:
    """Close the calling thread's connections, except one inside a transaction (a test's
    ``TestCase`` keeps its own)."""
    for connection in connections.all(initialized_only=True):
        if not connection.in_atomic_block:
            connection.close()


@contextmanager
def closing_connections() -> Iterator[None]:
    """For the life of a thread the runtime starts: close the thread's connections as
    it ends, so none outlives the command (each ``call_command`` in a test suite would
    otherwise leave its threads' sessions behind)."""
    try:
        yield
    finally:
        close_connections()


def connection_hooks() -> Hooks:
    """The hooks every command hands to the runtime."""
    return Hooks(
        around_job=fresh_connections,
        around_turn=tidy_connections,
        around_thread=closing_connections,
    )


def calibrated_clock() -> ClockSync | None:
    """The calibration of :func:`assembly.clock` (``None`` when ``CLOCK_SYNC`` is off or
    there is nothing to calibrate to), measured once now, before the runtime reads the
    clock; a failure is logged and the runtime measures again within seconds."""
    sync = assembly.clock_sync()
    if sync is not None:
        with tidy_connections():
            sync.sync_if_due()
    return sync


# -- logging and signals ----------------------------------------------------------------


@contextmanager
def command_logging(verbosity: int) -> Iterator[None]:
    """Show the runtime's log on stderr (INFO; DEBUG at ``-v 3``; warnings only at
    ``-v 0``), lines about a job naming it, unless the project's ``LOGGING`` already
    routes it somewhere."""
    logger = logging.getLogger(LOGGER_NAME)
    if logger.hasHandlers():
        yield
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.addFilter(JobLogFilter())
    handler.setFormatter(_ConsoleFormatter())
    previous_level = logger.level
    logger.addHandler(handler)
    logger.setLevel(_VERBOSITY_LEVELS.get(verbosity, logging.DEBUG))
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous_level)


class _ConsoleFormatter(logging.Formatter):
    """The console format, naming the job a line is about (the runtime's own lines, and
    whatever is logged while a job runs), so one ``grep`` finds a job's story."""

    def __init__(self) -> None:
        super().__init__(_LOG_FORMAT)
        self._about_a_job = logging.Formatter(_JOB_LOG_FORMAT)

    def format(self, record: logging.LogRecord) -> str:
        if getattr(record, "millrace_job_id", None) is not None:
            return self._about_a_job.format(record)
        return super().format(record)


@contextmanager
def stop_signals(request_stop: Callable[[], None]) -> Iterator[None]:
    """SIGTERM/SIGINT call ``request_stop`` inside the block (main thread only; from
    another thread, e.g. ``call_command`` in a test's thread, signals are left alone)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    restore = handle_stop_signals(request_stop)
    try:
        yield
    finally:
        restore()
