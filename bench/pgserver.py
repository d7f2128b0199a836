"""The benchmarks' way to the throwaway PostgreSQL server (scripts/testdb.sh)."""

from __future__ import annotations

import os
import sys
import time
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

import psycopg
from psycopg import sql as pgsql

DURABILITY = ("fsync", "synchronous_commit", "full_page_writes")
"""The server settings that decide what a commit costs: every bench prints them."""
DROP_WAIT = 60


def server_url() -> str:
    """The server's URL, or exit with how to start one."""
    url = os.environ.get("MILLRACE_TEST_POSTGRES_URL")
    if not url:
        sys.exit(
            "MILLRACE_TEST_POSTGRES_URL is not set: run `make bench`, or first "
            '`eval "$(scripts/testdb.sh start)"`'
        )
    return url


def admin_connection(url: str) -> psycopg.Connection[Any]:
    """An autocommit connection for creating and dropping the benchmarks' databases."""
    parts = urlsplit(url)
    return psycopg.connect(
        host=parts.hostname or "127.0.0.1",
        port=parts.port or 5432,
        user=unquote(parts.username or ""),
        password=unquote(parts.password or ""),
        dbname=parts.path.lstrip("/") or "postgres",
        autocommit=True,
    )


def database_url(url: str, name: str) -> str:
    """``url`` naming the database ``name`` instead."""
    return urlunsplit(urlsplit(url)._replace(path=f"/{name}"))


def recreate_database(url: str, name: str, *, create: bool) -> None:
    """Drop the database ``name`` (ending its sessions), then create it afresh if
    ``create``. An autovacuum worker on it cannot be ended by a non-superuser's
    ``FORCE``: the drop is retried once a second, for at most ``DROP_WAIT`` seconds."""
    drop = pgsql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(pgsql.Identifier(name))
    with admin_connection(url) as conn:
        for attempt in range(DROP_WAIT):
            try:
                conn.execute(drop)
                break
            except psycopg.errors.InsufficientPrivilege:
                if attempt == DROP_WAIT - 1:
                    raise
                time.sleep(1)
        if create:
            conn.execute(pgsql.SQL("CREATE DATABASE {}").format(pgsql.Identifier(name)))
