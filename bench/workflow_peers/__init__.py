"""The workflow benchmark's drivers: one module per system, run by
``python -m workflow_peers SYSTEM COMMAND``.

``workflow_bench.py`` (in the project's virtualenv) runs each driver as a subprocess, the
way ``peer_bench.py`` runs ``peers``: the Millrace driver with the project's Python, DBOS
with the Python of a separate virtualenv, so the project never imports DBOS. ``harness``
(standard library only) times the same workloads against both, each with one worker
process of the system's own.
"""
