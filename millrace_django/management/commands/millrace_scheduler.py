"""``manage.py millrace_scheduler``: the scheduler alone (activation, cron, retention)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from millrace_django import assembly
from millrace_django.management.support import (
    calibrated_clock,
    close_connections,
    command_logging,
    connection_hooks,
    load_settings,
    stop_signals,
)
from millrace_django.runtime import Scheduler


class Command(BaseCommand):
    help = (
        "Run the Millrace scheduler alone: as soon as work is due, and at least every "
        "MILLRACE['SCHEDULER_INTERVAL'], it makes due jobs claimable, fires due recurring "
        "jobs, purges jobs past MILLRACE['RETENTION'] and forgets workers silent for "
        "MILLRACE['WORKER_RETENTION']. "
        "Safe to run on every node. SIGTERM or Ctrl-C stops it."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--once", action="store_true", help="Make one pass, print what it did, and exit."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        settings = load_settings()
        try:
            with command_logging(options["verbosity"]):
                scheduler = Scheduler(
                    assembly.storage(),
                    assembly.clock(),
                    settings,
                    hooks=connection_hooks(),
                    clock_sync=calibrated_clock(),
                )
                if options["once"]:
                    done = scheduler.run_once()
                    if options["verbosity"] >= 1:
                        workers = "worker" if done.forgotten == 1 else "workers"
                        self.stdout.write(
                            f"activated {done.activated}, fired {done.fired} recurring, "
                            f"purged {done.purged}, forgot {done.forgotten} silent {workers}"
                        )
                    return
                with stop_signals(scheduler.request_stop):
                    scheduler.run()
        finally:
            close_connections()
