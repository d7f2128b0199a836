"""Running one job's function: resolve it, call it with its arguments, in its tenant.

Sync functions are called on the calling (worker) thread; async ones run on a fresh
event loop via :func:`asyncio.run`, or on a loop the worker supplies (one long-lived
loop for all async jobs is cheaper than a loop per job), or are awaited by
:func:`run_handler_async` on the loop itself.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

from millrace_django.contract import JobRecord
from millrace_django.engine.invocation import decode, resolve
from millrace_django.engine.job_context import JobContext
from millrace_django.engine.registry import CONTEXT_PARAMETER, JobDefinition
from millrace_django.engine.tenancy import tenant


@dataclass(frozen=True, slots=True)
class PreparedJob:
    """A stored job made runnable: its definition and decoded arguments."""

    definition: JobDefinition[..., Any]
    args: list[Any]
    kwargs: dict[str, Any]


def prepare(job: JobRecord) -> PreparedJob:
    """Resolve and decode ``job``; raises :class:`~millrace_django.engine.errors.UnrunnableJob`
    (the worker declares such a job dead)."""
    definition = resolve(job.invocation.target)
    args, kwargs = decode(definition, job.invocation)
    return PreparedJob(definition, args, kwargs)


def run_handler(
    prepared: PreparedJob,
    context: JobContext,
    *,
    loop: asyncio.AbstractEventLoop | None = None,
) -> object:
    """Call the job function and return its result (exceptions propagate).

    The job's tenant is ambient during the call, and ``context`` is passed if the
    function declares it. With ``loop``, an async function runs there: a loop running
    in another thread is waited on; an idle loop is run until the job completes.
    """
    kwargs = dict(prepared.kwargs)
    if prepared.definition.accepts_context:
        kwargs[CONTEXT_PARAMETER] = context
    with tenant(context.tenant):
        result = prepared.definition.fn(*prepared.args, **kwargs)
        if prepared.definition.is_async:
            return _complete(result, loop)
        return result


async def run_handler_async(prepared: PreparedJob, context: JobContext) -> object:
    """Like :func:`run_handler`, on the running event loop: an async function is awaited
    here (it holds no thread while it waits); a plain one is called."""
    kwargs = dict(prepared.kwargs)
    if prepared.definition.accepts_context:
        kwargs[CONTEXT_PARAMETER] = context
    with tenant(context.tenant):
        result = prepared.definition.fn(*prepared.args, **kwargs)
        if prepared.definition.is_async:
            return await result
        return result


def _complete(
    coroutine: Coroutine[Any, Any, object], loop: asyncio.AbstractEventLoop | None
) -> object:
    if loop is not None and loop.is_running():
        try:
            running = asyncio.get_running_loop()
        except RuntimeError:
            running = None
        if running is loop:
            coroutine.close()
            raise RuntimeError(
                "run_handler would block the event loop it was called from; call it from "
                "another thread"
            )
    contained = _contained(coroutine)
    if loop is None:
        ended = asyncio.run(contained)
    elif not loop.is_running():
        ended = loop.run_until_complete(contained)
    else:
        ended = asyncio.run_coroutine_threadsafe(contained, loop).result()
    if isinstance(ended, _Escaped):
        raise ended.error
    return ended


@dataclass(frozen=True, slots=True)
class _Escaped:
    """What a job's coroutine raised that its event loop would not keep to the task."""

    error: BaseException


async def _contained(coroutine: Coroutine[Any, Any, object]) -> object:
    """Await ``coroutine``, handing back a ``KeyboardInterrupt`` or ``SystemExit`` it
    raises instead of raising it: asyncio re-raises those two out of the loop running
    the task, which would end the worker's shared loop (and its thread) rather than the
    job. The caller raises it again on its own thread, where it is the job's failure."""
    try:
        return await coroutine
    except (KeyboardInterrupt, SystemExit) as error:
        return _Escaped(error)
