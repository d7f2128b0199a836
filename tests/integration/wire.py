"""What a PostgreSQL connection sends, message by message: a count of round trips that
needs no timing."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager

import psycopg
from django.db import connections


@contextmanager
def wire_messages(alias: str = "postgres") -> Iterator[list[str]]:
    """The simple-query messages the storage's connection sends meanwhile (libpq trace):
    each is one round trip; BEGIN and COMMIT would be messages of their own."""
    connection = connections[alias]
    connection.ensure_connection()
    pgconn = connection.connection.pgconn
    sent: list[str] = []
    with tempfile.TemporaryFile("w+") as trace:
        pgconn.trace(os.dup(trace.fileno()))  # libpq keeps (and never closes) its FILE*
        pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS)
        try:
            yield sent
        finally:
            pgconn.untrace()
        trace.seek(0)
        for line in trace.read().splitlines():
            parts = line.split("\t")
            if len(parts) >= 4 and parts[0] == "F" and parts[2].strip() in ("Query", "Sync"):
                sent.append(parts[3].strip().strip('"'))
