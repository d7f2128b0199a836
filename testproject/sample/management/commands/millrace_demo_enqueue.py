"""``manage.py millrace_demo_enqueue``: store one sample job of every shape."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from testproject.sample.samples import enqueue_samples, forget_everything


class Command(BaseCommand):
    help = "Enqueue the demo's sample jobs: one of every shape."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--reset",
            action="store_true",
            help="First delete every stored job and recurring definition (demo databases only!).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["reset"]:
            forget_everything()
        created = enqueue_samples()
        if options["verbosity"] >= 1:
            self.stdout.write("Enqueued the samples:")
            for shape, what in created.items():
                self.stdout.write(f"  {shape:<21} {_show(what)}")


def _show(what: object) -> str:
    if isinstance(what, tuple):
        return ", ".join(str(item) for item in what)
    return str(what)
