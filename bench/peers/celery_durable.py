"""Celery as :mod:`peers.celery` runs it, on a Redis that makes each write durable before
it answers (an append-only file, ``appendfsync always``), as PostgreSQL's defaults make
each commit: the same driver, tasks and configurations; the bench gives this system a
broker of its own, started with that persistence (``peer_bench.redis_server``)."""

from __future__ import annotations

from peers.celery import make_peer, run_worker

__all__ = ["make_peer", "run_worker"]
