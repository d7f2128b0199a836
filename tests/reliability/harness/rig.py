"""One scenario's equipment: the database URL, a ledger, a supervisor and a client.

``Rig.open`` installs the transition journal on the (migrated, empty) database at
``url``; ``Rig.close`` kills every process and removes the journal. ``Rig.check`` runs
the checkers once the processes have stopped.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote
from uuid import UUID

from django.db import connections

from millrace_django.contract import JobState
from tests.reliability.harness import journal
from tests.reliability.harness.checkers import Report, check
from tests.reliability.harness.ledger import Ledger
from tests.reliability.harness.supervisor import Supervisor, process_environment


def url_of(alias: str) -> str:
    """The ``postgres://`` URL of a Django alias's (test) database, for processes."""
    s = connections[alias].settings_dict
    credentials = f"{quote(s['USER'], safe='')}:{quote(s['PASSWORD'], safe='')}"
    return f"postgres://{credentials}@{s['HOST']}:{s['PORT']}/{s['NAME']}"


@dataclass(slots=True)
class Rig:
    url: str
    ledger: Ledger
    supervisor: Supervisor
    directory: Path

    @classmethod
    def open(
        cls,
        url: str,
        directory: Path,
        *,
        settings: Mapping[str, Any] | None = None,
        database: Mapping[str, Any] | None = None,
        max_restarts: int = 20,
    ) -> Rig:
        """Journal on, ledger in ``directory/ledger``, process logs in ``directory/logs``;
        processes run with :data:`~.scale.FAST` updated by ``settings``."""
        journal.install(url)
        ledger = Ledger(directory / "ledger")
        logs = directory / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        environment = process_environment(url, ledger.directory, settings, database)
        supervisor = Supervisor(environment, logs, max_restarts=max_restarts)
        return cls(url, ledger, supervisor, directory)

    def configure(
        self, settings: Mapping[str, Any], database: Mapping[str, Any] | None = None
    ) -> None:
        """Processes started (or restarted) from now on run with :data:`~.scale.FAST`
        updated by ``settings``, and the database entry updated by ``database``."""
        self.supervisor.environment = process_environment(
            self.url, self.ledger.directory, settings, database
        )

    def check(
        self,
        expected: Mapping[UUID, JobState],
        *,
        others: JobState | None = None,
        lease_tolerance: timedelta = timedelta(0),
    ) -> Report:
        """Audit the database and the ledger (call once the processes stopped)."""
        self.supervisor.check()
        return check(
            self.url, self.ledger, expected, others=others, lease_tolerance=lease_tolerance
        )

    def close(self) -> None:
        self.supervisor.close()
        journal.uninstall(self.url)
