"""COPY's text format: the rows of a large enqueue as ``COPY ... FROM STDIN`` reads them
(:data:`~millrace_django.storage.orm.postgresql.statements.COPY`)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from functools import lru_cache
from operator import itemgetter

from millrace_django.contract import JobRecord, Limit, RetrySpec, limits_json, retry_json
from millrace_django.models import JOB_STATE_CODES
from millrace_django.storage.orm.postgresql.parameters import (
    encode_json,
    json_value,
    timestamp_text,
)
from millrace_django.storage.orm.postgresql.statements import AS_STORED
from millrace_django.storage.orm.rows import active_scope, arguments_text, limit_key

_shared = itemgetter(*AS_STORED, "state", "retry", "limits")
"""What the rows of a batch mostly share, in the column order of :data:`~.statements.COPY`
(but the target), from a record's field dict: twice as quick as reading the attributes."""
_NULL = "\\N"


def _copy_text(text: str) -> str:
    """``text`` as COPY reads it back: backslash, tab, newline and carriage return escaped."""
    return text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")


def _copy_value(value: object) -> str:
    """A value stored as it is, as COPY reads it: the text of the JSON rows of
    :meth:`~.hotpath.PostgresHotPath._insert` (see :func:`~.parameters.json_value`)."""
    if value is None:
        return _NULL
    if isinstance(value, str):
        return _copy_text(value)
    if isinstance(value, bool):
        return "t" if value else "f"
    if isinstance(value, int):
        return str(value)
    return str(json_value(value))


class _Escaped(dict[str, str]):
    """Texts as COPY reads them, each distinct one escaped once (the jobs of a batch
    mostly share their target, retry policy, arguments)."""

    def __missing__(self, text: str) -> str:
        escaped = self[text] = _copy_text(text)
        return escaped


def copy_lines(jobs: Sequence[JobRecord], track_scope: bool) -> Iterator[str]:
    """The rows of ``jobs`` in COPY's text format, in the column order of
    :data:`~.statements.COPY`: what :func:`~millrace_django.storage.orm.rows.job_values`
    stores. The columns rows share are written once per run of rows whose values are
    equal."""
    escaped = _Escaped()
    previous: object = None
    shared_text = ""
    for job in jobs:
        shared = (*_shared(job.__dict__), job.invocation.target)
        if shared != previous:
            *stored, state, retry, limits, target = shared
            scope = active_scope(job) if track_scope else None
            texts = [escaped[target], str(JOB_STATE_CODES[state]), escaped[_retry_text(retry)]]
            limited = [
                _copy_value(bool(limits)),
                _copy_value(_limits_text(limits)),
                _copy_value(limit_key(limits)),
            ]
            previous, shared_text = (
                shared,
                "\t".join([*map(_copy_value, stored), *texts, _copy_value(scope), *limited]),
            )
        result, progress, checkpoint = job.result, job.progress, job.checkpoint
        yield (
            f"{job.id.int:032x}\t{timestamp_text(job.created_at)}\t"
            f"{escaped[arguments_text(job.invocation)]}\t"
            f"{_NULL if result is None else escaped[encode_json(result)]}\t"
            f"{_NULL if progress is None else escaped[encode_json(progress)]}\t"
            f"{_NULL if checkpoint is None else escaped[encode_json(checkpoint)]}\t{shared_text}\n"
        )


@lru_cache(maxsize=64)
def _retry_text(retry: RetrySpec) -> str:
    """A retry policy as stored (most jobs share a few policies)."""
    return encode_json(retry_json(retry))


def _limits_text(limits: tuple[Limit, ...]) -> str | None:
    """Limits as stored (a job carries the few its function and queue give)."""
    return None if not limits else encode_json(limits_json(limits))
