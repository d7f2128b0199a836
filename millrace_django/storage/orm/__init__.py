"""The Django ORM provider: one storage for every database Django supports well.

PostgreSQL 15+, SQLite, MariaDB 10.6+ and (compiled, not run, in our tests) SQL Server
share one ORM path; :mod:`.vendors` holds what differs between them, and
:mod:`.postgresql` hand-writes PostgreSQL's hot statements.

The provider's public face is ``__all__``. Everything else here is its inside, with no
promise to keep it: in particular the seams between its modules, :class:`.OrmContext`
(one storage's view of its database), :class:`.Vendor` (what one database does
differently) and :class:`.HotPath` (the claim and acknowledgement statements), are not
extension points. A project plugs in a storage of its own through the contract
(``docs/writing-a-storage-provider.md``), never by subclassing or importing these.
"""

from millrace_django.storage.orm.provider import DjangoStorage, configuration_problems

__all__ = ["DjangoStorage", "configuration_problems"]
