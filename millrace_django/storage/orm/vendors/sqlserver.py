"""SQL Server (mssql-django): ``READPAST`` locks, the driver's query timeout, and uuid
ties sorted in RFC 4122 order whatever the column type."""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any
from uuid import UUID

from django.db import DatabaseError
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import CharField, Expression, F, Func, Value
from django.db.models.functions import Cast

from millrace_django.storage.orm.vendors.base import Vendor

_BINARY_COLLATION = "Latin1_General_100_BIN2"


class SQLServer(Vendor):
    """``skip_locked`` renders ``WITH (ROWLOCK, UPDLOCK, READPAST)``. Statements are
    bounded by the driver's query timeout (set for the storage call, then restored), lock
    waits by ``SET LOCK_TIMEOUT`` at the start of each storage-owned transaction (a
    session setting: it stays on the connection afterwards). Uuid ties never sort in
    ``uniqueidentifier`` order (see :meth:`native_uuids`). Compiled, not run, in our
    tests unless ``MILLRACE_TEST_SQLSERVER_URL`` names a server."""

    _TRANSIENT_MARKERS = ("40001", "1205")  # deadlock victim (not 1222, a lock timeout)

    current_time_sql = "SELECT SYSUTCDATETIME()"

    def __init__(self, *, uuid_column: str = "char(32)") -> None:
        self.uuid_column = uuid_column

    @classmethod
    def for_connection(cls, connection: BaseDatabaseWrapper) -> Vendor:
        return cls(uuid_column=str(connection.data_types.get("UUIDField", "char(32)")))

    @property
    def native_uuids(self) -> bool:
        """Whether uuids are ``uniqueidentifier`` columns, which sort in a mixed-endian
        layout of their bytes (mssql-django stores them as ``char(32)`` lowercase hex,
        which sorts in byte order: digits before ``a-f``)."""
        return self.uuid_column.lower() == "uniqueidentifier"

    @contextmanager
    def statement_timeout(
        self, connection: BaseDatabaseWrapper, timeout: timedelta
    ) -> Iterator[None]:
        connection.ensure_connection()
        raw = connection.connection
        previous = raw.timeout
        raw.timeout = max(1, math.ceil(timeout.total_seconds()))
        try:
            yield
        finally:
            if connection.connection is raw:
                raw.timeout = previous

    def begin(self, connection: BaseDatabaseWrapper, timeout: timedelta) -> None:
        milliseconds = max(1, int(timeout.total_seconds() * 1000))
        with connection.cursor() as cursor:
            cursor.execute(f"SET LOCK_TIMEOUT {milliseconds}")

    def is_transient(self, error: DatabaseError) -> bool:
        text = " ".join(str(arg) for arg in error.args)
        return any(marker in text for marker in self._TRANSIENT_MARKERS)

    def id_order(self, field: str) -> str | Expression:
        if not self.native_uuids:
            return field  # hex text: the column's own order, so its indexes serve
        return _canonical_text(F(field))

    def id_bound(self, value: UUID) -> Any:
        if not self.native_uuids:
            return value
        return _binary(Value(str(value).upper(), output_field=CharField(max_length=36)))


def _canonical_text(uuid: F) -> Expression:
    """A uuid column's canonical text (upper case, as SQL Server casts it), compared byte
    for byte: RFC 4122 order. Never ``CAST(... AS binary(16))``, which keeps the
    mixed-endian layout."""
    return _binary(Cast(uuid, CharField(max_length=36)))


def _binary(text: Expression) -> Expression:
    """``text COLLATE Latin1_General_100_BIN2`` (not Django's ``Collate``, which brackets
    the collation name; SQL Server takes it bare)."""
    return Func(
        text,
        template=f"%(expressions)s COLLATE {_BINARY_COLLATION}",
        output_field=CharField(max_length=36),
    )
