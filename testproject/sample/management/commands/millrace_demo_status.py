"""``manage.py millrace_demo_status``: where the demo's jobs are."""

from __future__ import annotations

import sys
from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from testproject.sample.samples import check, job_rows, summary

PENDING_EXIT = 3
"""``--check`` exit status while some sample is still on its way."""


class Command(BaseCommand):
    help = "Print the state of every stored job; with --check, verify the samples' outcomes."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--check",
            action="store_true",
            help=f"Exit 0 if every sample ended as expected, {PENDING_EXIT} while some are "
            "still pending, 1 if one ended otherwise.",
        )
        parser.add_argument("--quiet", action="store_true", help="Print nothing when pending.")

    def handle(self, *args: Any, **options: Any) -> None:
        rows = job_rows()
        pending, problems = check(rows)
        if options["check"] and pending:
            if not options["quiet"]:
                self.stdout.write("still running: " + "; ".join(problems))
            sys.exit(PENDING_EXIT)
        self.stdout.write("Jobs by function:")
        for line in summary(rows):
            self.stdout.write(line)
        if options["check"]:
            if problems:
                self.stderr.write("unexpected: " + "; ".join(problems))
                sys.exit(1)
            self.stdout.write("Every sample ended as expected.")
