"""``manage.py millrace_health``: one verdict for an orchestrator's probe.

Exit status 0 when every check passes, 1 otherwise, with the first failure as one line
on stderr (``--json`` also prints every check on stdout). The checks run on a helper
thread under one deadline (``--timeout``), so a database that hangs instead of
refusing still gives an answer in time.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import Any, NoReturn

from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.migrations.executor import MigrationExecutor

from millrace_django import assembly
from millrace_django.conf import MillraceSettings
from millrace_django.contract import TenantFilter, WorkerHeartbeat
from millrace_django.dashboard.services import GONE_AFTER_HEARTBEATS
from millrace_django.management.support import close_connections, load_settings

APP_LABEL = "millrace_django"
THIS_HOST = "."
"""``--worker`` without a value: any worker registered from this host."""


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    ok: bool
    detail: str


class Unhealthy(Exception):
    """A check failed; its message is the reason."""


class Command(BaseCommand):
    help = (
        "Check that Millrace can work here: the database answers, its migrations are "
        "applied, and optionally that a worker's heartbeat is fresh and the backlog is "
        "not too old. Exits 0 when healthy, 1 with a one-line reason otherwise."
    )
    requires_system_checks: list[str] = []  # a probe runs often; `check` is for deploys
    requires_migrations_checks = False

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--timeout",
            type=float,
            default=5.0,
            metavar="SECONDS",
            help="Seconds all checks together may take (default 5).",
        )
        parser.add_argument(
            "--worker",
            nargs="?",
            const=THIS_HOST,
            metavar="WORKER_ID",
            help="Require a fresh registry heartbeat: of this worker id, or without a "
            "value, of at least one worker on this host.",
        )
        parser.add_argument(
            "--max-heartbeat-age",
            type=float,
            metavar="SECONDS",
            help="How old the heartbeat --worker looks at may be (default: "
            f"{GONE_AFTER_HEARTBEATS} x MILLRACE['HEARTBEAT'], when the dashboard shows a "
            "worker as gone).",
        )
        parser.add_argument(
            "--max-queue-latency",
            type=float,
            metavar="SECONDS",
            help="Fail when the oldest enqueued job was created longer ago than this.",
        )
        parser.add_argument("--json", action="store_true", help="Print every check as JSON.")

    def handle(self, *args: Any, **options: Any) -> None:
        settings = load_settings()
        if options["timeout"] <= 0:
            raise CommandError("--timeout must be positive")
        checks: list[Check] = []
        failure = _within(options["timeout"], lambda: _run_checks(settings, options, checks))
        checks = list(checks)  # a check still running past the deadline adds no more
        healthy = failure is None
        if options["json"]:
            report = {"healthy": healthy, "reason": failure, "checks": [asdict(c) for c in checks]}
            self.stdout.write(json.dumps(report))
        elif healthy and options["verbosity"] >= 1:
            self.stdout.write("healthy: " + "; ".join(c.detail for c in checks))
        if failure is not None:
            raise CommandError(f"unhealthy: {failure}", returncode=1)


def _within(seconds: float, run: Callable[[], None]) -> str | None:
    """Run ``run`` on a daemon thread; the reason it failed, or timed out, else ``None``."""
    outcome: list[str | None] = []

    def target() -> None:
        try:
            run()
            outcome.append(None)
        except Unhealthy as unhealthy:
            outcome.append(str(unhealthy))
        except Exception as error:
            outcome.append(f"{type(error).__name__}: {error}".splitlines()[0])
        finally:
            close_connections()

    thread = threading.Thread(target=target, name="millrace-health", daemon=True)
    thread.start()
    thread.join(seconds)
    if not outcome:
        return f"the checks did not finish within {seconds:g} s (is the database answering?)"
    return outcome[0]


def _run_checks(settings: MillraceSettings, options: dict[str, Any], checks: list[Check]) -> None:
    def passed(name: str, detail: str) -> None:
        checks.append(Check(name, True, detail))

    def failed(name: str, detail: str) -> NoReturn:
        checks.append(Check(name, False, detail))
        raise Unhealthy(detail)

    alias = settings.database if settings.storage == "orm" else DEFAULT_DB_ALIAS
    started = time.perf_counter()
    try:
        with connections[alias].cursor() as cursor:
            cursor.execute("SELECT 1")
            cursor.fetchone()
    except Exception as error:
        failed("database", f"database {alias!r} is unreachable: {_first_line(error)}")
    passed("database", f"database {alias!r} answered in {_ms(time.perf_counter() - started)}")

    passed("clock", _calibrate())

    pending = _unapplied_migrations(alias)
    if pending:
        failed("migrations", f"{len(pending)} migration(s) not applied, first {pending[0]}")
    passed("migrations", "migrations applied")

    storage = assembly.storage()
    now = assembly.clock().now()
    if options["worker"] is not None:
        heartbeat = settings.heartbeat * GONE_AFTER_HEARTBEATS
        if options["max_heartbeat_age"] is not None:
            heartbeat = timedelta(seconds=options["max_heartbeat_age"])
        list_workers = getattr(storage, "list_workers", None)
        if list_workers is None:
            failed("worker", "the storage keeps no worker registry; --worker cannot be checked")
        beat = _latest_heartbeat(list_workers(), options["worker"])
        who = "this host" if options["worker"] == THIS_HOST else f"worker {options['worker']}"
        if beat is None:
            failed("worker", f"no registered worker for {who}")
        age = now - beat.seen_at
        if age > heartbeat:
            failed("worker", f"{who}: last heartbeat {_s(age)} ago (limit {_s(heartbeat)})")
        passed("worker", f"{who}: last heartbeat {_s(age)} ago ({beat.worker_id})")

    if options["max_queue_latency"] is not None:
        limit = timedelta(seconds=options["max_queue_latency"])
        statistics = getattr(storage, "get_statistics", None)
        if statistics is None:
            failed(
                "queue_latency",
                "the storage has no monitoring read model; --max-queue-latency needs one",
            )
        oldest = _oldest(statistics(TenantFilter.any()).oldest_enqueued_by_queue)
        if oldest is not None and now - oldest[1] > limit:
            failed(
                "queue_latency",
                f"queue {oldest[0]!r}: oldest enqueued job created {_s(now - oldest[1])} ago "
                f"(limit {_s(limit)})",
            )
        passed(
            "queue_latency",
            "no job waits" if oldest is None else f"oldest enqueued job {_s(now - oldest[1])} old",
        )


def _calibrate() -> str:
    """Measure this host's clock against the database's, as workers do, so the ages
    below are read in the database's time; say how far apart they are."""
    sync = assembly.clock_sync()
    if sync is None:
        return "clock not calibrated (CLOCK_SYNC is off, or the storage has no database clock)"
    measured = sync.sync()
    if measured is None:
        return "the database runs on this machine's clock"
    offset = measured.offset.total_seconds()
    return (
        f"this host's clock is {abs(offset):.3f} s {'behind' if offset >= 0 else 'ahead of'} "
        f"the database's (within {measured.round_trip.total_seconds() / 2:.3f} s)"
    )


def _unapplied_migrations(alias: str) -> list[str]:
    executor = MigrationExecutor(connections[alias])
    targets = executor.loader.graph.leaf_nodes(APP_LABEL)
    plan = executor.migration_plan(targets)
    return [f"{migration.app_label}.{migration.name}" for migration, backwards in plan]


def _latest_heartbeat(beats: Iterable[WorkerHeartbeat], worker: str) -> WorkerHeartbeat | None:
    """The newest of ``worker``'s heartbeats (:data:`THIS_HOST`: of this host's)."""
    host = socket.gethostname()
    mine = [
        beat
        for beat in beats
        if (beat.hostname == host if worker == THIS_HOST else beat.worker_id == worker)
    ]
    return max(mine, key=lambda beat: beat.seen_at, default=None)


def _oldest(created: Mapping[str, datetime]) -> tuple[str, datetime] | None:
    """The queue whose oldest enqueued job is the oldest, and that job's creation."""
    return min(created.items(), key=lambda item: item[1], default=None)


def _first_line(error: BaseException) -> str:
    return (str(error).strip().splitlines() or [type(error).__name__])[0]


def _ms(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms"


def _s(delta: timedelta) -> str:
    return f"{delta.total_seconds():.0f} s"
