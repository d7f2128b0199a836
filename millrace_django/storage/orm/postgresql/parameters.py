"""The hot statements' parameters as PostgreSQL reads them: array literals built here (the
driver's per-element list adaptation costs several times more) and JSON text."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

from millrace_django.contract import JobTransition
from millrace_django.models import INSTANCE_STATE_CODES
from millrace_django.storage.orm.context import Chain


def timestamp_text(value: datetime) -> str:
    """``value`` as PostgreSQL reads a ``timestamptz``. An instant in UTC (as the clock
    gives them) is written naive with a ``Z``: Python formats the offset ``+00:00``
    slower than all the rest, a microsecond per value on the hot paths' every job."""
    if value.tzinfo is UTC:
        return value.replace(tzinfo=None).isoformat() + "Z"
    return value.isoformat()


def json_value(value: object) -> object:
    """What :func:`json.dumps` cannot write itself, as PostgreSQL reads it."""
    if isinstance(value, datetime):
        return timestamp_text(value)
    if isinstance(value, timedelta):
        return f"{value.days} days {value.seconds} seconds {value.microseconds} microseconds"
    return str(value)  # UUID


encode_rows = json.JSONEncoder(default=json_value, separators=(",", ":")).encode
encode_json = json.JSONEncoder().encode  # as JSONField stores a value


def _plain_array(values: Sequence[object]) -> str:
    """A PostgreSQL array literal of values whose text needs no quoting (numbers, ISO
    timestamps, booleans as ``t``/``f``)."""
    return "{" + ",".join(map(str, values)) + "}"


def uuid_array(ids: Sequence[UUID]) -> str:
    """A ``uuid[]`` literal, each id as its 32 hex digits: PostgreSQL reads that form as
    well as the hyphenated one, which takes Python five times longer to write."""
    return "{" + ",".join([id_.hex for id_ in ids]) + "}"


def quoted_array(values: Sequence[str | None]) -> str:
    """A PostgreSQL array literal of strings, each quoted (``None`` is NULL)."""
    quoted = {
        value: '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
        for value in set(values)
        if value is not None
    }
    return "{" + ",".join("NULL" if value is None else quoted[value] for value in values) + "}"


def complete_parameters(
    transitions: Sequence[JobTransition], now: datetime, channel: str = ""
) -> dict[str, Any]:
    """The parameters of the acknowledgement of ``transitions`` (successes finished by
    ``now`` unless they say when; a limited job's queue hinted on ``channel``, none if
    empty: its slot is free). Array literals built here, as for every array parameter of
    this module: the driver's per-element list adaptation costs several times more."""
    return {
        "channel": channel,
        "ids": uuid_array([t.job_id for t in transitions]),
        "workers": quoted_array([t.expected_worker_id for t in transitions]),
        "attempts": _plain_array([t.expected_attempt for t in transitions]),
        "failures": _plain_array([t.failures for t in transitions]),
        "finished": _plain_array([timestamp_text(t.finished_at or now) for t in transitions]),
        "results": quoted_array(
            [None if t.result is None else encode_json(t.result) for t in transitions]
        ),
    }


def checkpoint_parameters(chains: Sequence[Chain]) -> dict[str, Any]:
    """The parameters of :data:`~.statements.CHECKPOINT`: each step's fence and chain, and each
    chain's checkpoint."""
    steps = [t for chain in chains for t in chain.steps]
    checkpoints = [chain.checkpoint for chain in chains]
    instances = [c.instance for c in checkpoints]
    return {
        "ids": uuid_array([t.job_id for t in steps]),
        "workers": quoted_array([t.expected_worker_id for t in steps]),
        "attempts": _plain_array([t.expected_attempt for t in steps]),
        "chains": _plain_array([n for n, chain in enumerate(chains, 1) for _ in chain.steps]),
        "lengths": _plain_array([len(chain.steps) for chain in chains]),
        "instances": uuid_array([i.id for i in instances]),
        "expected": _plain_array([c.expected_revision for c in checkpoints]),
        "definitions": quoted_array([i.definition_id for i in instances]),
        "versions": _plain_array([i.definition_version for i in instances]),
        "states": _plain_array([INSTANCE_STATE_CODES[i.state] for i in instances]),
        "data": quoted_array([encode_json(i.data) for i in instances]),
        "cursors": quoted_array([encode_json(i.cursor) for i in instances]),
        "tenants": quoted_array([i.tenant_id for i in instances]),
        "created": _plain_array([timestamp_text(i.created_at) for i in instances]),
        "updated": _plain_array([timestamp_text(i.updated_at) for i in instances]),
    }
