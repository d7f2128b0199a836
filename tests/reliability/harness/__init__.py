"""The reliability harness: real processes, a ledger outside the database, checkers.

Small API, in the order a scenario uses it::

    rig = Rig.open(url, tmp_path)          # journal triggers on; ledger + logs dirs
    rig.configure({"LEASE": 2})            # MILLRACE settings of processes started next
    rig.supervisor.worker("w1", "--concurrency=2")   # millrace_worker --no-scheduler
    rig.supervisor.scheduler("s1")                    # millrace_scheduler
    rig.supervisor.wait_started("w1")
    rig.supervisor.kill("w1")                          # restarted by the supervisor
    rig.supervisor.stop("w1")                          # retire + SIGTERM, no restart
    report = rig.check({job_id: JobState.SUCCEEDED})  # after the processes stopped
    report.assert_clean()                              # precise diagnosis on failure
    rig.close()                                        # kill everything, drop journal

- :mod:`.supervisor` — :class:`Supervisor`: slots of ``manage.py`` processes
  (:mod:`.settings` as their settings module, on any PostgreSQL URL), restarted when
  they die, within ``max_restarts``; kills/stops/exits are ledger events.
- :mod:`.ledger` — one append-only file per process; :class:`Ledger` reads them all
  into :class:`Execution` intervals (monotonic time, comparable across processes).
- :mod:`.jobs` — the workload: ``work(seconds)`` (ledger start/finish, returns who ran
  it) and ``crash()`` (a poison pill that SIGKILLs its own worker).
- :mod:`.journal` — row triggers (PostgreSQL) journaling every job state/attempt change
  and every recurring fire, in the writing transaction.
- :mod:`.checkers` — :func:`check` audits journal + jobs table + attempt history +
  ledger: terminal as expected, valid paths, one completion, every claim accounted for,
  no overlap unless fenced. :class:`Report` has ``counts`` (e.g. ``"exit reclaimed"``,
  ``"fenced overlaps"``) and per-job ``audits`` for exact scenario criteria.
- :mod:`.scale` — :data:`SCALE` (CI tier, or full with ``MILLRACE_RELIABILITY=full``)
  and :data:`FAST` timings (2 s lease, 0.5 s heartbeat).
- :mod:`.processes` — :class:`ManagePy`, :func:`wait_until` (bounded polling).

The package imports nothing itself (its :mod:`.settings` and :mod:`.jobs` load in worker
processes before Django is set up): import from the modules, e.g.
``from tests.reliability.harness.rig import Rig``.

A database other than the test run's (a private cluster) works the same: migrate it,
then ``Rig.open(its_url, tmp_path)``; enqueue through a ``JobClient`` on a storage for
that database.
"""
