"""The Django ORM provider: one storage for every database Django supports well.

PostgreSQL 15+, SQLite, MariaDB 10.6+ and (compiled, not run, in our tests) SQL Server
share one ORM path; :mod:`.vendors` holds what differs between them, and
:mod:`.postgresql` hand-writes PostgreSQL's hot statements.
"""

from millrace_django.storage.orm.provider import DjangoStorage, configuration_problems

__all__ = ["DjangoStorage", "configuration_problems"]
