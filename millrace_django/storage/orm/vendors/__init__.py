"""What differs between databases, and nothing else: settings the provider relies on,
how a statement is bounded in time, which errors mean "replay", how wake-up hints
travel, how uuid ties sort and how to read the server's clock; one module per database
(:mod:`.base` holds the portable defaults each starts from).

Everything not here is the shared ORM path, but for PostgreSQL's hand-written hot
statements (:mod:`millrace_django.storage.orm.postgresql`), which the provider picks by
vendor.
"""

from __future__ import annotations

from django.db.backends.base.base import BaseDatabaseWrapper

from millrace_django.storage.orm.vendors.base import ConfigurationProblem, Vendor
from millrace_django.storage.orm.vendors.mysql import MariaDB
from millrace_django.storage.orm.vendors.postgresql import PostgreSQL
from millrace_django.storage.orm.vendors.sqlite import SQLite
from millrace_django.storage.orm.vendors.sqlserver import SQLServer

__all__ = ["ConfigurationProblem", "Vendor", "vendor_for"]

_VENDORS: dict[str, type[Vendor]] = {
    "postgresql": PostgreSQL,
    "sqlite": SQLite,
    "mysql": MariaDB,
    "microsoft": SQLServer,
}


def vendor_for(connection: BaseDatabaseWrapper) -> Vendor:
    """The strategy for ``connection``'s database (the portable one if unknown)."""
    return _VENDORS.get(connection.vendor, Vendor).for_connection(connection)
