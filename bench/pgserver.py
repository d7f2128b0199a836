"""The benchmarks' way to the throwaway PostgreSQL server (scripts/testdb.sh)."""

from __future__ import annotations

import os
import sys
from typing import Any
from urllib.parse import unquote, urlsplit

import psycopg


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
