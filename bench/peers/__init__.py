"""The peer benchmark's drivers: one module per system, run by ``python -m peers SYSTEM``.

``peer_bench.py`` (in the project's virtualenv) runs each driver as a subprocess: the
Millrace driver with the project's Python, the others with the Python of a separate
virtualenv that holds the peers, so the project never imports them. ``harness`` holds
what every driver shares (standard library only): the timed loops, the worker processes,
and the stamps jobs send when they start.
"""
