"""A private PostgreSQL 15 cluster the database-fault scenarios may restart at will.

The shared throwaway server (``scripts/testdb.sh``) serves every other test and must
never be restarted; these scenarios start their own: ``initdb`` into a temporary
directory (as the ``postgres`` OS user when run as root, as ``testdb.sh`` does), on a
free loopback port, with the same role, password and database names as the shared
server, so the same URLs and settings work on both. Every wait is bounded.

:func:`migrate` creates the schema with the harness's process settings, and
:func:`django_alias` makes the cluster a database alias of the test process, so the
test enqueues and calls the storage on it as an application would.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

import psycopg
from django.db import connections

from testproject.settings import _server_database
from tests.reliability.harness.processes import REPO, wait_until
from tests.reliability.harness.supervisor import process_environment

PG_BIN = Path(os.environ.get("PG_BIN", "/usr/lib/postgresql/15/bin"))
USER = PASSWORD = DATABASE = "millrace"
"""As ``scripts/testdb.sh`` names them."""
READY_SECONDS = 30.0
STOP_SECONDS = 30
# Commits stay synchronous: an immediate shutdown is a server crash, and a commit the
# server acknowledged must survive it (``synchronous_commit = off`` would lose the last
# few, and a job whose completion was lost would run twice). ``fsync`` only guards
# against an operating-system crash, which these scenarios never cause.
SERVER_SETTINGS = """
# millrace private fault-test cluster
listen_addresses = '127.0.0.1'
port = {port}
unix_socket_directories = '{sockets}'
max_connections = 100
fsync = off
full_page_writes = off
"""

type ShutdownMode = Literal["fast", "immediate"]
"""``fast`` rolls back open transactions and disconnects clients cleanly; ``immediate``
is a crash: no checkpoint, crash recovery at the next start."""


def _as_postgres(command: list[str]) -> list[str]:
    """``command`` run as the ``postgres`` OS user when we are root (initdb refuses root)."""
    return ["runuser", "-u", "postgres", "--", *command] if os.geteuid() == 0 else command


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


class PgCluster:
    """One cluster in a temporary directory; :meth:`create` to get a running one."""

    def __init__(self, directory: Path, port: int) -> None:
        self.directory = directory
        self.port = port
        self.data = directory / "data"
        self.log_path = directory / "postgres.log"

    @classmethod
    def create(cls) -> PgCluster:
        """initdb, start, and create the ``millrace`` role and database."""
        if not (PG_BIN / "initdb").exists():
            raise RuntimeError(f"PostgreSQL binaries not found in {PG_BIN} (set PG_BIN)")
        directory = Path(tempfile.mkdtemp(prefix="millrace-faults-pg.", dir="/tmp"))
        if os.geteuid() == 0:
            shutil.chown(directory, "postgres", "postgres")
        cluster = cls(directory, _free_port())
        try:
            cluster._initdb()
            cluster.start()
            with cluster.superuser() as admin:
                admin.execute(f"CREATE ROLE {USER} LOGIN CREATEDB PASSWORD '{PASSWORD}'")
                admin.execute(f"CREATE DATABASE {DATABASE} OWNER {USER}")
        except BaseException:
            cluster.destroy()
            raise
        return cluster

    @property
    def url(self) -> str:
        """The application's URL (what ``worker_settings`` and ``_server_database`` read)."""
        return f"postgres://{USER}:{PASSWORD}@127.0.0.1:{self.port}/{DATABASE}"

    def superuser(self, database: str = "postgres") -> psycopg.Connection[Any]:
        """An autocommit superuser connection over the cluster's Unix socket."""
        return psycopg.connect(
            host=str(self.directory),
            port=self.port,
            user="postgres",
            dbname=database,
            autocommit=True,
            connect_timeout=5,
        )

    def start(self) -> None:
        self._pg_ctl("start", "-l", str(self.log_path), "-t", str(int(READY_SECONDS)))
        wait_until(self.accepting, READY_SECONDS, "the private PostgreSQL accepting connections")

    def stop(self, mode: ShutdownMode = "fast") -> None:
        self._pg_ctl("stop", "-m", mode, "-t", str(STOP_SECONDS))

    def restart(self, mode: ShutdownMode, down_for: float = 0.0) -> None:
        """Stop in ``mode``, stay down ``down_for`` seconds, start again (same port)."""
        self.stop(mode)
        time.sleep(down_for)
        self.start()

    def accepting(self) -> bool:
        try:
            with self.superuser():
                return True
        except psycopg.OperationalError:
            return False

    def running(self) -> bool:
        return (self.data / "postmaster.pid").exists()

    def destroy(self) -> None:
        """Stop (immediately: nothing here is worth a checkpoint) and delete everything."""
        try:
            if self.running():
                self.stop("immediate")
        finally:
            shutil.rmtree(self.directory, ignore_errors=True)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def _initdb(self) -> None:
        self._run(
            [
                str(PG_BIN / "initdb"),
                "-D",
                str(self.data),
                "-U",
                "postgres",
                "--auth-local=trust",
                "--auth-host=scram-sha-256",
                "--encoding=UTF8",
                "--locale=C.UTF-8",
            ]
        )
        settings = SERVER_SETTINGS.format(port=self.port, sockets=self.directory)
        with (self.data / "postgresql.conf").open("a") as conf:
            conf.write(settings)

    def _pg_ctl(self, *args: str) -> None:
        self._run([str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-w", *args])

    def _run(self, command: list[str]) -> None:
        # A session of its own (the postmaster outlives pg_ctl) and no inherited
        # descriptors, so the server never holds the test's pipes open.
        result = subprocess.run(
            _as_postgres(command),
            cwd="/",
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=READY_SECONDS + STOP_SECONDS,
            start_new_session=True,
            check=False,
        )
        if result.returncode != 0:
            raise RuntimeError(
                f"{' '.join(command[:2])} failed ({result.returncode}):\n"
                f"{result.stdout}{result.stderr}\n{self.log()[-3000:]}"
            )


def migrate(url: str, scratch: Path) -> None:
    """Create the schema on ``url`` with the settings the harness's processes use."""
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--verbosity=0"],
        cwd=REPO,
        env=process_environment(url, scratch),
        check=True,
        timeout=120,
    )


@contextmanager
def django_alias(alias: str, url: str) -> Iterator[None]:
    """``alias`` names the database at ``url`` in this process while the block runs
    (Django's defaults filled in, as for a configured alias); closed and removed after."""
    entry = connections.configure_settings({"default": {}, alias: _server_database(url)})
    connections.settings[alias] = entry[alias]
    try:
        yield
    finally:
        connections[alias].close()
        del connections[alias]
        del connections.settings[alias]
