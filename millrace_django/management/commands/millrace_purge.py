"""``manage.py millrace_purge``: delete finished jobs past the retention, in batches."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from millrace_django import assembly
from millrace_django.management.support import (
    load_settings,
    parse_duration,
    positive,
)


class Command(BaseCommand):
    help = (
        "Delete jobs that finished (succeeded, dead, cancelled) longer ago than "
        "MILLRACE['RETENTION'] or --older-than, with their history, in batches; active "
        "jobs are never touched. Prints how many were deleted."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--older-than",
            metavar="DURATION",
            help="Age instead of MILLRACE['RETENTION']: 30d, 12h, 90m, 45s, 2w, or seconds.",
        )
        parser.add_argument(
            "--batch-size",
            type=int,
            metavar="N",
            help="Jobs deleted per statement; default: MILLRACE['PURGE_BATCH'].",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        settings = load_settings()
        if options["older_than"] is not None:
            age = parse_duration("--older-than", options["older_than"])
        elif settings.retention is not None:
            age = settings.retention
        else:
            raise CommandError(
                "MILLRACE['RETENTION'] is None (finished jobs are kept forever); "
                "pass --older-than to purge anyway"
            )
        batch = positive("--batch-size", options["batch_size"]) or settings.purge_batch
        storage = assembly.storage()
        before = assembly.clock().now() - age
        total = 0
        while True:
            count = storage.purge_finished(before, batch)
            total += count
            if count < batch:
                break
        if options["verbosity"] >= 1:
            self.stdout.write(
                f"purged {total} finished job{'' if total == 1 else 's'} "
                f"(finished before {before:%Y-%m-%d %H:%M:%S} UTC)"
            )
        else:
            self.stdout.write(str(total))
