"""PostgreSQL's hot statements, hand-written: a batch claim, a batch acknowledgement (which
also wakes continuations and announces them) and an enqueue (which also announces what it
enqueued), each one statement, so each runs alone in autocommit: one round trip.

Where the alias allows it, each is prepared once per database session (``PREPARE``, sent
with its first ``EXECUTE``), so a call pays neither parsing nor planning. A prepared
statement is then sent on the driver's connection without a Django cursor whenever nothing
needs to see it, so a call pays little Python either. Same contract as
:class:`~millrace_django.storage.orm.hotpath.OrmHotPath`.

The rooms: :mod:`.hotpath` (what each call sends and reads back), :mod:`.statements`
(the SQL text), :mod:`.parameters` (the parameters as PostgreSQL reads them),
:mod:`.session` (preparing and sending on the database session, with hand-quoted
literals) and :mod:`.copy_format` (the rows of a large enqueue, as ``COPY`` reads them).
"""
