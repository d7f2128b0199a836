"""``manage.py millrace_worker``: run jobs (and the scheduler) until told to stop."""

from __future__ import annotations

import argparse
import gc
import os
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from millrace_django import assembly
from millrace_django.clock import Clock
from millrace_django.conf import MillraceSettings
from millrace_django.contract import JobStorage, MonitoringStorage
from millrace_django.management import supervisor
from millrace_django.management.support import (
    calibrated_clock,
    close_connections,
    command_logging,
    connection_hooks,
    duration_text,
    load_settings,
    parse_duration,
    parse_queues,
    positive,
    stop_signals,
)
from millrace_django.runtime import Hooks, Scheduler, Worker, WorkerStats
from millrace_django.runtime.hooks import daemon_thread
from millrace_django.runtime.until_done import Unfinished, UntilDone

JOIN_SECONDS = 30.0
"""How long to wait for the scheduler thread's current pass after the worker stopped."""

UNTIL_DONE_TIMEOUT = "5m"
"""The bound of ``--until-done`` given without one."""


class Command(BaseCommand):
    help = (
        "Run a Millrace worker, plus a scheduler unless --no-scheduler. SIGTERM or Ctrl-C "
        "stops claiming and lets running jobs finish (MILLRACE['SHUTDOWN_TIMEOUT']); a "
        "second signal releases them at once. Exits 0 after a clean stop."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--queues",
            action="append",
            metavar="NAMES",
            help="Comma-separated queues to claim from (repeatable); default: all of "
            "MILLRACE['QUEUES'].",
        )
        parser.add_argument(
            "--concurrency",
            type=int,
            metavar="N",
            help="Jobs run at once per process; default: MILLRACE['CONCURRENCY'].",
        )
        parser.add_argument(
            "--processes",
            type=int,
            default=1,
            metavar="N",
            help="Worker processes to start on this machine (default 1); signals are "
            "forwarded to them and the scheduler runs in one of them.",
        )
        parser.add_argument(
            "--no-scheduler",
            action="store_true",
            help="Do not run the scheduler here (another process runs it).",
        )
        until = parser.add_mutually_exclusive_group()
        until.add_argument(
            "--until-idle",
            action="store_true",
            help="Exit once nothing is claimable and nothing runs (for scripts and CI); "
            "with the scheduler, due jobs are activated first. Jobs scheduled or retried "
            "later are left waiting: see --until-done.",
        )
        until.add_argument(
            "--until-done",
            nargs="?",
            const=UNTIL_DONE_TIMEOUT,
            metavar="TIMEOUT",
            help="Exit once every job of the worker's queues due within TIMEOUT (default "
            f"{UNTIL_DONE_TIMEOUT}; s, m, h, d, w or seconds) has finished: scheduled jobs "
            "and retries due by then are waited for. Exits 1, listing what was left, if "
            "TIMEOUT passes first.",
        )
        parser.add_argument("--supervised-by", type=int, help=argparse.SUPPRESS)

    def handle(self, *args: Any, **options: Any) -> None:
        settings = load_settings()
        queues = parse_queues(options["queues"], settings)
        concurrency = positive("--concurrency", options["concurrency"])
        processes = positive("--processes", options["processes"]) or 1
        if options["until_done"] is not None:
            options["until_done"] = parse_duration("--until-done", options["until_done"])
        if processes > 1:
            self._supervise(processes, queues, concurrency, options)
            return
        with command_logging(options["verbosity"]):
            stats, unfinished = self._run(settings, queues, concurrency, options)
        if options["verbosity"] >= 1:
            self.stdout.write(describe(stats))
        if unfinished is not None:
            raise CommandError(
                f"--until-done: {len(unfinished.jobs)} job(s) due by "
                f"{unfinished.deadline.isoformat()} had not finished when the timeout "
                f"passed:\n{unfinished.describe()}"
            )

    def _run(
        self,
        settings: MillraceSettings,
        queues: frozenset[str] | None,
        concurrency: int | None,
        options: dict[str, Any],
    ) -> tuple[WorkerStats, Unfinished | None]:
        if settings.storage == "memory":
            self.stderr.write(
                "MILLRACE['STORAGE'] is 'memory': this worker only sees jobs enqueued in "
                "its own process."
            )
        storage = assembly.storage()
        clock = assembly.clock()
        clock_sync = calibrated_clock()
        hooks = connection_hooks()
        try:
            worker = Worker(
                storage,
                clock,
                settings,
                queues=queues,
                concurrency=concurrency,
                hooks=hooks,
                clock_sync=clock_sync,
            )
        except ValueError as error:
            raise CommandError(str(error)) from error
        scheduler = (
            None
            if options["no_scheduler"]
            else Scheduler(storage, clock, settings, hooks=hooks, clock_sync=clock_sync)
        )

        def request_stop() -> None:
            worker.request_stop()
            if scheduler is not None:
                scheduler.request_stop()

        parent_watch = (
            supervisor.watch_parent(options["supervised_by"], request_stop)
            if options["supervised_by"]
            else None
        )
        scheduling = None
        watch = (
            None
            if options["until_done"] is None
            else _until_done(storage, clock, worker, options["until_done"], request_stop, hooks)
        )
        try:
            with stop_signals(request_stop):
                if scheduler is not None:
                    if options["until_idle"]:
                        scheduler.run_once()  # what is due now counts as claimable now
                    scheduling = daemon_thread(
                        scheduler.run, "millrace-scheduler", hooks.around_thread
                    )
                    scheduling.start()
                settle_heap()
                if watch is not None:
                    watch.start()
                worker.run(until_idle=options["until_idle"])
                if scheduler is not None:
                    scheduler.request_stop()
                if scheduling is not None:
                    scheduling.join(JOIN_SECONDS)
        finally:
            if scheduler is not None:
                scheduler.request_stop()  # also when the worker failed
            if parent_watch is not None:
                parent_watch.set()
            if watch is not None:
                watch.close()
            close_connections()
        return worker.stats, watch.unfinished if watch is not None else None

    def _supervise(
        self,
        processes: int,
        queues: frozenset[str] | None,
        concurrency: int | None,
        options: dict[str, Any],
    ) -> None:
        common = [
            "millrace_worker",
            "--processes=1",
            f"--supervised-by={os.getpid()}",
            f"--verbosity={options['verbosity']}",
            "--skip-checks",  # this process ran them
        ]
        if queues is not None:
            common.append("--queues=" + ",".join(sorted(queues)))
        if concurrency is not None:
            common.append(f"--concurrency={concurrency}")
        if options["until_idle"]:
            common.append("--until-idle")
        if options["until_done"] is not None:
            common.append(f"--until-done={duration_text(options['until_done'])}")
        if options.get("no_color"):
            common.append("--no-color")
        commands = [
            supervisor.child_command(
                common + (["--no-scheduler"] if index > 0 or options["no_scheduler"] else [])
            )
            for index in range(processes)
        ]
        exits = supervisor.supervise(commands, announce=self.stderr.write)
        failed = [child for child in exits if not child.clean]
        if failed:
            raise CommandError(
                "worker process(es) failed: "
                + ", ".join(f"pid {child.pid} exited with {child.returncode}" for child in failed)
            )
        if options["verbosity"] >= 1:
            self.stdout.write(f"{processes} worker processes stopped cleanly")


def _until_done(
    storage: JobStorage,
    clock: Clock,
    worker: Worker,
    timeout: timedelta,
    stop: Callable[[], None],
    hooks: Hooks,
) -> UntilDone:
    """The watch that stops ``worker`` once the jobs due within ``timeout`` finished."""
    if not isinstance(storage, MonitoringStorage):
        raise CommandError("--until-done needs a storage that can list jobs")
    return UntilDone(
        storage,
        clock,
        queues=worker.queues,
        deadline=clock.now() + timeout,
        stop=stop,
        hooks=hooks,
    )


def describe(stats: WorkerStats) -> str:
    """One line on what a worker did, for the end of the command."""
    outcomes = ", ".join(
        f"{count} {state.value}" for state, count in sorted(stats.acknowledged.items())
    )
    line = f"worker {stats.worker_id} stopped: {stats.claimed} claimed"
    if outcomes:
        line += f" ({outcomes})"
    if stats.fence_lost or stats.refused or stats.abandoned:
        line += (
            f"; {stats.fence_lost} lost to another worker, {stats.refused} refused, "
            f"{stats.abandoned} abandoned"
        )
    return line


PYTHON_YOUNG_GENERATION = 2_000
"""Python's own threshold for the youngest generation: a project that set another keeps it."""

YOUNG_GENERATION = 50_000
"""Container objects allocated (net) between two collections of the youngest generation,
at least. Each collection walks every young object still alive, and a busy worker holds
many: its jobs in flight, and with ``async`` jobs a thousand coroutines with their tasks
and timers. At Python's 2,000, a collection came every hundred jobs or so and promoted the
batch in flight to older generations, whose collections walked it again; at 10,000, an
async drain still spent about a tenth of its worker CPU in them (39-40 µs per 10 ms job
against 33-37 µs at 50,000). The cost: cyclic garbage (an exception's traceback, a
finished task) waits longer to be freed, a few megabytes more."""


def settle_heap() -> None:
    """Move what is alive before the first job (the project's modules, settings, models,
    URLs) out of the garbage collector's sight: it lives as long as the process, and a
    full collection walking it again and again stalls every job for tens of milliseconds
    (``gc.freeze``, after a collection so that no garbage is kept). Then collect the
    youngest generation less often (:data:`YOUNG_GENERATION`), unless the project set its
    own threshold (anything but Python's default; 0 turns automatic collection off)."""
    gc.collect()
    gc.freeze()
    young, middle, old = gc.get_threshold()
    if young == PYTHON_YOUNG_GENERATION:
        gc.set_threshold(YOUNG_GENERATION, middle, old)
