"""Schema pieces that adapt to the database they are created on.

One set of migrations serves every vendor, but vendors differ in what an index can be:
PostgreSQL, SQLite and SQL Server have partial indexes, MariaDB has none, and only
PostgreSQL (15+) has ``NULLS NOT DISTINCT``. Django silently drops what a vendor cannot
build; these classes build the closest equivalent instead, decided from the connection's
features so the storage provider (:func:`tracks_key_scope`) reads the same decision.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.models import BaseConstraint, CharField, Index, Model, Q, UniqueConstraint

_IGNORED_CONDITION_WARNINGS = frozenset({"models.W036", "models.W037", "models.W047"})


def tracks_key_scope(connection: BaseDatabaseWrapper) -> bool:
    """Whether idempotency scopes are enforced through the ``key_scope`` column.

    Without ``NULLS NOT DISTINCT`` a unique index on ``(tenant_id, idempotency_key)``
    cannot make the null tenant one scope, so the storage writes a digest of the scope
    into ``key_scope`` while the job is active and clears it when the job ends.
    """
    return not connection.features.supports_nulls_distinct_unique_constraints


class PartialIndex(Index):
    """A partial index where the database has them; elsewhere a full index led by
    ``lead`` (the columns the condition tests), so the rows the condition selects still
    sit together instead of the index silently losing its condition."""

    def __init__(self, *, fields: list[str], condition: Q, name: str, lead: list[str]) -> None:
        super().__init__(fields=fields, condition=condition, name=name)
        self.lead = list(lead)

    def create_sql(
        self,
        model: type[Model],
        schema_editor: BaseDatabaseSchemaEditor,
        using: str = "",
        **kwargs: Any,
    ) -> Any:
        if schema_editor.connection.features.supports_partial_indexes:
            return super().create_sql(model, schema_editor, using, **kwargs)
        full = Index(fields=[*self.lead, *self.fields], name=self.name)
        return full.create_sql(model, schema_editor, using, **kwargs)

    def check(self, model: type[Model], connection: BaseDatabaseWrapper) -> list[Any]:
        return [
            e for e in super().check(model, connection) if e.id not in _IGNORED_CONDITION_WARNINGS
        ]

    def deconstruct(self) -> tuple[str, Sequence[Any], dict[str, Any]]:
        path, args, kwargs = super().deconstruct()
        return path, args, {**kwargs, "lead": self.lead}


class ActiveKeyConstraint(BaseConstraint):
    """At most one active job per ``(tenant_id, idempotency_key)``, the null tenant
    being one scope.

    PostgreSQL 15+: a partial unique index on the two columns, ``NULLS NOT DISTINCT``.
    Elsewhere: a unique index on ``key_scope``, partial (``IS NOT NULL``) where the
    database allows it, plain on MariaDB, where NULLs are distinct anyway.
    """

    def __init__(self, *, name: str, active_states: list[int]) -> None:
        super().__init__(name=name)
        self.active_states = list(active_states)

    def variant(self, connection: BaseDatabaseWrapper) -> UniqueConstraint:
        if not tracks_key_scope(connection):
            return UniqueConstraint(
                fields=["tenant_id", "idempotency_key"],
                condition=Q(idempotency_key__isnull=False, state__in=self.active_states),
                nulls_distinct=False,
                name=self.name,
            )
        if connection.features.supports_partial_indexes:
            return UniqueConstraint(
                fields=["key_scope"], condition=Q(key_scope__isnull=False), name=self.name
            )
        return UniqueConstraint(fields=["key_scope"], name=self.name)

    def _on(self, schema_editor: BaseDatabaseSchemaEditor | None) -> UniqueConstraint:
        if schema_editor is None:
            raise ValueError(f"{self.name}: the SQL depends on the database; pass its editor")
        return self.variant(schema_editor.connection)

    def constraint_sql(
        self, model: type[Model] | None, schema_editor: BaseDatabaseSchemaEditor | None
    ) -> Any:
        return self._on(schema_editor).constraint_sql(model, schema_editor)

    def create_sql(
        self, model: type[Model] | None, schema_editor: BaseDatabaseSchemaEditor | None
    ) -> Any:
        return self._on(schema_editor).create_sql(model, schema_editor)

    def remove_sql(
        self, model: type[Model] | None, schema_editor: BaseDatabaseSchemaEditor | None
    ) -> Any:
        return self._on(schema_editor).remove_sql(model, schema_editor)

    def validate(
        self, model: type[Model], instance: Model, exclude: Any = None, using: str = "default"
    ) -> None:
        self.variant(connections[using]).validate(model, instance, exclude, using)

    def check(self, model: type[Model], connection: BaseDatabaseWrapper) -> list[Any]:
        errors = self.variant(connection).check(model, connection)
        return [e for e in errors if e.id not in _IGNORED_CONDITION_WARNINGS]

    def deconstruct(self) -> tuple[str, Sequence[Any], dict[str, Any]]:
        path, args, kwargs = super().deconstruct()
        return path, args, {**kwargs, "active_states": self.active_states}

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, ActiveKeyConstraint):
            return NotImplemented
        return self.deconstruct() == other.deconstruct()

    def __hash__(self) -> int:
        return hash(self.name)


_EXACT_COLLATIONS = {
    "postgresql": "C",
    "microsoft": "Latin1_General_100_BIN2",
}


class ExactCharField(CharField):  # type: ignore[type-arg]
    """Text compared and ordered byte for byte on every database.

    Identifiers (queues, tenants, keys, worker and recurring ids, signal names) must not
    fold case or ignore trailing spaces, as MariaDB's and SQL Server's default
    collations do, and must sort ordinally, as the contract's tie-breaks require.
    """

    def db_parameters(self, connection: BaseDatabaseWrapper) -> dict[str, Any]:
        parameters: dict[str, Any] = super().db_parameters(connection)
        if connection.vendor == "mysql":
            mariadb = getattr(connection, "mysql_is_mariadb", True)
            parameters["collation"] = "utf8mb4_nopad_bin" if mariadb else "utf8mb4_0900_bin"
        elif connection.vendor in _EXACT_COLLATIONS:
            parameters["collation"] = _EXACT_COLLATIONS[connection.vendor]
        return parameters


__all__ = ["ActiveKeyConstraint", "ExactCharField", "PartialIndex", "tracks_key_scope"]
