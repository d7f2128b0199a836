"""``@job``: turning module-level functions into job definitions a worker can import.

A job is recorded by its dotted target ``"package.module:qualname"``, so it must be a
plain function reachable by import: nested functions, lambdas and methods are refused
at decoration, not when the worker fails to find them at 3 a.m.

Option naming: the user's arguments pass through ``enqueue``/``schedule`` untouched
except four reserved keywords, ``idempotency_key``, ``expires``, ``delay`` and ``at``. A
job function may not declare parameters with those names (refused at decoration). Every
other option (queue, priority, retry, timeout, and the key and deadline as well) goes
through ``fn.using(...)``, which never mixes with the function's arguments.
"""

from __future__ import annotations

import functools
import inspect
import math
import threading
import types
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, cast, overload
from uuid import UUID

from asgiref.sync import sync_to_async

from millrace_django.contract import DuplicatePolicy, Rate, RetrySpec, tags_of
from millrace_django.engine.client_slot import installed
from millrace_django.engine.declared_limits import concurrency_of, rate_of
from millrace_django.engine.errors import InvalidJobDefinition
from millrace_django.engine.expiry import Expiry, expiry_of
from millrace_django.engine.retry import (
    ExceptionClasses,
    exception_classes,
    validate_retry,
    with_filters,
)

CONTEXT_PARAMETER = "context"
"""A parameter with this name receives the :class:`~millrace_django.engine.JobContext`."""

RESERVED_PARAMETERS = frozenset({"idempotency_key", "expires", "on_duplicate", "delay", "at"})
"""Keywords ``enqueue``/``schedule`` keep for themselves."""

FITTING_SHAPES = 64
"""Call shapes each job remembers as fitting (a bound: ``**kwargs`` accepts any names)."""


@dataclass(frozen=True, slots=True)
class CallShape:
    """How every call of one shape binds, as :meth:`inspect.Signature.bind` would bind it.

    The passed values are numbered positionals first, then keywords in the order given;
    ``args`` and ``kwargs`` say which of them become the bound positional and keyword
    arguments. ``as_given``: both come out exactly as passed (the usual call)."""

    args: tuple[int, ...]
    kwargs: tuple[tuple[str, int], ...]
    as_given: bool


_lock = threading.Lock()
_registry: dict[str, JobDefinition[..., Any]] = {}


@dataclass(frozen=True, slots=True, kw_only=True)
class JobOptions:
    """Per-job options; ``None`` means "not set here" (a later layer or the default applies)."""

    queue: str | None = None
    priority: int | None = None
    retry: RetrySpec | None = None
    timeout: timedelta | None = None
    idempotency_key: str | None = None
    hard_timeout: timedelta | None = None
    """Seconds (or a ``timedelta``) after which the job's child process is killed."""
    expires: Expiry | None = None
    """The job's deadline: seconds or a ``timedelta`` from when it is due, or an aware
    instant (see :mod:`millrace_django.engine.expiry`)."""
    retry_on: tuple[type[BaseException], ...] | None = None
    give_up_on: tuple[type[BaseException], ...] | None = None
    concurrency: int | None = None
    """At most this many of the function's jobs (per key, if keyed) run at once,
    across every worker."""
    rate: Rate | None = None
    """At most this many starts of the function's jobs (per key, if keyed) per period."""
    tags: tuple[str, ...] | None = None
    """Labels stored with each job (see :mod:`millrace_django.contract.tags`); tags given
    to ``using`` replace the decoration's."""
    on_duplicate: DuplicatePolicy | None = None
    """What the enqueue does when an active job holds the idempotency key: ``"return"``
    its id (the default), ``"reject"`` (raise) or ``"replace"`` its call and due time."""

    def __post_init__(self) -> None:
        _check_name("queue", self.queue)
        _check_name("idempotency_key", self.idempotency_key)
        if self.priority is not None and type(self.priority) is not int:
            raise TypeError(f"priority must be an int; got {self.priority!r}")
        if self.retry is not None:
            if not isinstance(self.retry, RetrySpec):
                raise TypeError(f"retry must be a Retry policy; got {self.retry!r}")
            validate_retry(self.retry)
        if self.timeout is not None and (
            not isinstance(self.timeout, timedelta) or self.timeout <= timedelta(0)
        ):
            raise ValueError(f"timeout must be a positive timedelta; got {self.timeout!r}")
        if self.hard_timeout is not None:
            object.__setattr__(self, "hard_timeout", _positive_span(self.hard_timeout))
        if self.expires is not None:
            object.__setattr__(self, "expires", expiry_of(self.expires))
        for option in ("retry_on", "give_up_on"):
            value = getattr(self, option)
            if value is not None:
                object.__setattr__(self, option, exception_classes(option, value))
        concurrency_of(self.concurrency)
        object.__setattr__(self, "rate", rate_of(self.rate))
        if self.tags is not None:
            object.__setattr__(self, "tags", tags_of(self.tags))
        if self.on_duplicate is not None:
            policy = choice_of(DuplicatePolicy, "on_duplicate", self.on_duplicate)
            object.__setattr__(self, "on_duplicate", policy)

    def retry_policy(self, default: RetrySpec) -> RetrySpec:
        """The policy a job with these options stores: ``retry`` (else ``default``) with
        the ``retry_on`` and ``give_up_on`` filters, by class name."""
        return with_filters(self.retry or default, self.retry_on, self.give_up_on)

    def over(self, base: JobOptions) -> JobOptions:
        """These options, falling back to ``base`` where unset."""
        return replace(
            base,
            **{
                f.name: getattr(self, f.name)
                for f in fields(self)
                if getattr(self, f.name) is not None
            },
        )


class _Submits:
    """``enqueue`` and ``schedule`` through the default client, for both job shapes, and
    their async twins ``aenqueue`` and ``aschedule``."""

    __slots__ = ()

    def enqueue(
        self,
        *args: Any,
        idempotency_key: str | None = None,
        expires: Expiry | float | None = None,
        on_duplicate: DuplicatePolicy | str | None = None,
        **kwargs: Any,
    ) -> UUID:
        """Store a run now (via the default client); returns the job id, or the id of the
        active job already holding ``idempotency_key`` in this tenant (``on_duplicate``
        says what else to do then). A job with a deadline (``expires``) that has not
        started by then ends without running."""
        return installed().enqueue(
            cast("JobLike", self),
            *args,
            idempotency_key=idempotency_key,
            expires=expires,
            on_duplicate=on_duplicate,
            **kwargs,
        )

    def schedule(
        self,
        *args: Any,
        delay: timedelta | None = None,
        at: datetime | None = None,
        idempotency_key: str | None = None,
        expires: Expiry | float | None = None,
        on_duplicate: DuplicatePolicy | str | None = None,
        **kwargs: Any,
    ) -> UUID:
        """Store a run after ``delay`` or at the aware datetime ``at`` (exactly one); a
        delay given as ``expires`` counts from then."""
        return installed().schedule(
            cast("JobLike", self),
            *args,
            delay=delay,
            at=at,
            idempotency_key=idempotency_key,
            expires=expires,
            on_duplicate=on_duplicate,
            **kwargs,
        )

    # The async twins run the sync call the way Django's own async APIs do (django.tasks'
    # ``aenqueue``): on the one thread that serves thread-sensitive work, so the storage
    # reuses its database connection instead of opening one per call.

    async def aenqueue(
        self,
        *args: Any,
        idempotency_key: str | None = None,
        expires: Expiry | float | None = None,
        on_duplicate: DuplicatePolicy | str | None = None,
        **kwargs: Any,
    ) -> UUID:
        """:meth:`enqueue` from async code."""
        return await sync_to_async(self.enqueue, thread_sensitive=True)(
            *args,
            idempotency_key=idempotency_key,
            expires=expires,
            on_duplicate=on_duplicate,
            **kwargs,
        )

    async def aschedule(
        self,
        *args: Any,
        delay: timedelta | None = None,
        at: datetime | None = None,
        idempotency_key: str | None = None,
        expires: Expiry | float | None = None,
        on_duplicate: DuplicatePolicy | str | None = None,
        **kwargs: Any,
    ) -> UUID:
        """:meth:`schedule` from async code."""
        return await sync_to_async(self.schedule, thread_sensitive=True)(
            *args,
            delay=delay,
            at=at,
            idempotency_key=idempotency_key,
            expires=expires,
            on_duplicate=on_duplicate,
            **kwargs,
        )


class JobDefinition[**P, R](_Submits):
    """A registered job: the function, its target path and its decoration options.

    Calling it calls the function directly (no queue involved).
    """

    __name__: str  # copied from the function, like every wrapper's

    def __init__(
        self,
        fn: Callable[P, R],
        *,
        options: JobOptions,
        failure_observers: Sequence[JobDefinition[..., Any] | str] = (),
        limit_key: str | None = None,
        atomic: bool = False,
    ) -> None:
        self.fn = fn
        self.target = _target_of(fn)
        self.options = options
        self.failure_observers = _check_observers(self.target, failure_observers)
        full = inspect.signature(fn)
        self.accepts_context = _check_parameters(self.target, full)
        self.signature = full.replace(
            parameters=[p for p in full.parameters.values() if p.name != CONTEXT_PARAMETER]
        )
        """The signature arguments are bound against (``context`` left out)."""
        self.limit_key = _check_limit_key(self.target, self.signature, options, limit_key)
        """The argument whose value keys the function's limits (one scope per value)."""
        self.is_async = inspect.iscoroutinefunction(fn)
        self.atomic = _check_atomic(self.target, self.is_async, options, atomic)
        """Whether each attempt runs in a transaction on the storage's database that
        also writes its success (see docs/exactly-once.md)."""
        self._shapes: dict[tuple[int, tuple[str, ...]], CallShape] = {}
        """Call shapes known to fit :attr:`signature` (see :meth:`call_shape`)."""
        functools.update_wrapper(self, fn)

    def __call__(self, *args: P.args, **kwargs: P.kwargs) -> R:
        return self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<job {self.target}>"

    def check_call(self, args: Sequence[Any], kwargs: Mapping[str, Any]) -> None:
        """Raise ``TypeError`` if ``args`` and ``kwargs`` do not fit :attr:`signature`."""
        self.call_shape(len(args), tuple(kwargs))

    def call_shape(self, count: int, keywords: tuple[str, ...]) -> CallShape:
        """How a call with ``count`` positional arguments and these keywords binds;
        ``TypeError`` (naming no value) if it does not fit :attr:`signature`.

        Binding depends only on the shape, never on the values, so enqueues and workers
        bind each shape once, not every job."""
        key = (count, keywords)
        shape = self._shapes.get(key)
        if shape is None:
            # Bind the values' numbers in their place: they say where each value goes.
            numbers = dict(zip(keywords, range(count, count + len(keywords)), strict=True))
            bound = self.signature.bind(*range(count), **numbers)
            args, kwargs = tuple(bound.args), tuple(bound.kwargs.items())
            as_given = args == tuple(range(count)) and kwargs == tuple(numbers.items())
            shape = CallShape(args, kwargs, as_given)
            if len(self._shapes) < FITTING_SHAPES:
                self._shapes[key] = shape
        return shape

    def describe_call(self) -> str:
        """``"pkg.mod:fn(a, *, b=1)"``, for error messages (annotations left out)."""
        bare = self.signature.replace(
            parameters=[
                p.replace(annotation=inspect.Parameter.empty)
                for p in self.signature.parameters.values()
            ],
            return_annotation=inspect.Signature.empty,
        )
        return f"{self.target}{bare}"

    def using(self, **options: Any) -> ConfiguredJob:
        """This job with options for the next enqueue (``queue``, ``priority``, ``retry``,
        ``timeout``, ``idempotency_key``, ``hard_timeout``, ``retry_on``, ``give_up_on``,
        ``expires``, ``concurrency``, ``rate``, ``tags``, ``on_duplicate``);
        the definition is unchanged."""
        return ConfiguredJob(self, JobOptions()).using(**options)


@dataclass(frozen=True, slots=True)
class ConfiguredJob(_Submits):
    """A job plus call-site options, from ``fn.using(...)``; accepted wherever a job is."""

    definition: JobDefinition[..., Any]
    options: JobOptions

    def using(
        self,
        *,
        queue: str | None = None,
        priority: int | None = None,
        retry: RetrySpec | None = None,
        timeout: timedelta | None = None,
        idempotency_key: str | None = None,
        hard_timeout: timedelta | float | None = None,
        retry_on: ExceptionClasses | None = None,
        give_up_on: ExceptionClasses | None = None,
        expires: Expiry | float | None = None,
        concurrency: int | None = None,
        rate: Rate | str | None = None,
        tags: Sequence[str] | None = None,
        on_duplicate: DuplicatePolicy | str | None = None,
    ) -> ConfiguredJob:
        more = JobOptions(
            queue=queue,
            priority=priority,
            retry=retry,
            timeout=timeout,
            idempotency_key=idempotency_key,
            hard_timeout=hard_timeout,  # type: ignore[arg-type]  # (seconds: made a timedelta)
            retry_on=retry_on,  # type: ignore[arg-type]  # (one class: made a tuple)
            give_up_on=give_up_on,  # type: ignore[arg-type]
            expires=expires,  # type: ignore[arg-type]  # (seconds: made a timedelta)
            concurrency=concurrency,
            rate=rate,  # type: ignore[arg-type]  # (text: parsed)
            tags=tags,  # type: ignore[arg-type]  # (any sequence: made a sorted tuple)
            on_duplicate=on_duplicate,  # type: ignore[arg-type]  # (text: made a policy)
        )
        return ConfiguredJob(self.definition, more.over(self.options))


type JobLike = JobDefinition[..., Any] | ConfiguredJob
"""What the client accepts: a decorated function, or one configured with ``using``."""


def unpack(job: JobLike) -> tuple[JobDefinition[..., Any], JobOptions]:
    """The definition and the effective options of ``job`` (call-site over decoration)."""
    if isinstance(job, ConfiguredJob):
        return job.definition, job.options.over(job.definition.options)
    if isinstance(job, JobDefinition):
        return job, job.options
    raise TypeError(
        f"{job!r} is not a job; decorate the function with @job (or pass fn.using(...))"
    )


@overload
def job[**P, R](fn: Callable[P, R], /) -> JobDefinition[P, R]: ...


@overload
def job[**P, R](
    *,
    queue: str | None = None,
    priority: int | None = None,
    retry: RetrySpec | None = None,
    timeout: timedelta | None = None,
    hard_timeout: timedelta | float | None = None,
    retry_on: ExceptionClasses | None = None,
    give_up_on: ExceptionClasses | None = None,
    expires: timedelta | float | None = None,
    concurrency: int | None = None,
    rate: Rate | str | None = None,
    limit_key: str | None = None,
    failure_observers: Sequence[JobDefinition[..., Any] | str] = (),
    tags: Sequence[str] | None = None,
    atomic: bool = False,
) -> Callable[[Callable[P, R]], JobDefinition[P, R]]: ...


def job[**P, R](
    fn: Callable[P, R] | None = None,
    /,
    *,
    queue: str | None = None,
    priority: int | None = None,
    retry: RetrySpec | None = None,
    timeout: timedelta | None = None,
    hard_timeout: timedelta | float | None = None,
    retry_on: ExceptionClasses | None = None,
    give_up_on: ExceptionClasses | None = None,
    expires: timedelta | float | None = None,
    concurrency: int | None = None,
    rate: Rate | str | None = None,
    limit_key: str | None = None,
    failure_observers: Sequence[JobDefinition[..., Any] | str] = (),
    tags: Sequence[str] | None = None,
    atomic: bool = False,
) -> JobDefinition[P, R] | Callable[[Callable[P, R]], JobDefinition[P, R]]:
    """Register a module-level function (sync or async) as a job.

    Used bare (``@job``) or with options (``@job(queue="emails", retry=...)``).
    ``timeout`` is cooperative (the job is asked to stop); ``hard_timeout`` runs each
    attempt in a child process that is killed at the limit. ``retry_on`` and
    ``give_up_on`` (exception classes) decide which failures the retry policy may
    retry: ``give_up_on`` ones are final, and so is any outside ``retry_on`` when set.
    ``expires`` is a default deadline, a delay from when each job is due (seconds or a
    ``timedelta``). ``concurrency`` and ``rate`` (``"10/s"``, ``"600/m"``) limit the
    function's jobs across every worker, per value of the argument ``limit_key`` when
    given (see docs/flow-control.md). ``failure_observers`` are jobs enqueued with the
    dead job's id (a ``str``) as their only argument, in the same transition that
    declares this job dead. ``tags`` (a few short labels) are stored with each job,
    to filter the dashboard's job list by and to group its catalog. With ``atomic``,
    each attempt runs in a transaction on the storage's database that also writes the
    job's success: its writes there commit with its ``succeeded``, fenced, or not at all
    (sync functions without ``hard_timeout`` only; see docs/exactly-once.md).
    """
    options = JobOptions(
        queue=queue,
        priority=priority,
        retry=retry,
        timeout=timeout,
        hard_timeout=hard_timeout,  # type: ignore[arg-type]  # (seconds: made a timedelta)
        retry_on=retry_on,  # type: ignore[arg-type]  # (one class: made a tuple)
        give_up_on=give_up_on,  # type: ignore[arg-type]
        expires=None if expires is None else expiry_of(expires, instant_allowed=False),
        concurrency=concurrency,
        rate=rate,  # type: ignore[arg-type]  # (text: parsed)
        tags=tags,  # type: ignore[arg-type]  # (any sequence: made a sorted tuple)
    )

    def decorate(function: Callable[P, R]) -> JobDefinition[P, R]:
        definition = JobDefinition(
            function,
            options=options,
            failure_observers=failure_observers,
            limit_key=limit_key,
            atomic=atomic,
        )
        with _lock:
            _registry[definition.target] = definition
        return definition

    return decorate if fn is None else decorate(fn)


def registered_jobs() -> Mapping[str, JobDefinition[..., Any]]:
    """Every job decorated so far in this process, by target (a snapshot)."""
    with _lock:
        return dict(_registry)


def lookup(target: str) -> JobDefinition[..., Any] | None:
    """The registered job for ``target``, without importing anything (one dictionary
    read, atomic without the lock: the worker looks up every job it runs)."""
    return _registry.get(target)


def _target_of(fn: object) -> str:
    if isinstance(fn, JobDefinition):
        raise InvalidJobDefinition(f"{fn!r} is already a job; apply @job once")
    if not isinstance(fn, types.FunctionType):
        raise InvalidJobDefinition(
            f"@job needs a plain module-level function; got {fn!r} "
            "(staticmethods, classmethods, partials and callables are not importable by name)"
        )
    name = f"{fn.__module__}.{fn.__qualname__}"
    if fn.__name__ == "<lambda>":
        raise InvalidJobDefinition(
            f"@job cannot register a lambda ({name}): a worker finds jobs by name; "
            "use a module-level def"
        )
    if "<locals>" in fn.__qualname__:
        raise InvalidJobDefinition(
            f"@job cannot register {name}: it is nested inside another function, so a "
            "worker cannot import it; move it to module level"
        )
    if "." in fn.__qualname__:
        raise InvalidJobDefinition(
            f"@job cannot register {name}: it looks like a method; jobs must be "
            "module-level functions (call the method from one)"
        )
    if fn.__module__ in (None, "__main__"):
        raise InvalidJobDefinition(
            f"@job cannot register {fn.__qualname__} from __main__: a worker process "
            "cannot import it; put jobs in an importable module"
        )
    if inspect.isgeneratorfunction(fn) or inspect.isasyncgenfunction(fn):
        raise InvalidJobDefinition(f"@job cannot register the generator function {name}")
    return f"{fn.__module__}:{fn.__qualname__}"


def _check_parameters(target: str, signature: inspect.Signature) -> bool:
    """Refuse reserved parameter names; report whether the job asks for a context."""
    for parameter in signature.parameters.values():
        if parameter.name in RESERVED_PARAMETERS and parameter.kind not in (
            parameter.VAR_POSITIONAL,
            parameter.VAR_KEYWORD,
        ):
            raise InvalidJobDefinition(
                f"{target} has a parameter named {parameter.name!r}, which enqueue/schedule "
                f"reserve for their own options ({', '.join(sorted(RESERVED_PARAMETERS))}); "
                "rename the parameter"
            )
    context = signature.parameters.get(CONTEXT_PARAMETER)
    if context is None or context.kind in (context.VAR_POSITIONAL, context.VAR_KEYWORD):
        return False
    if context.kind is context.POSITIONAL_ONLY:
        raise InvalidJobDefinition(
            f"{target} takes 'context' positional-only; the worker passes it by keyword"
        )
    return True


def _check_observers(
    target: str, observers: Sequence[JobDefinition[..., Any] | str]
) -> tuple[JobDefinition[..., Any] | str, ...]:
    if isinstance(observers, str | JobDefinition):
        observers = (observers,)
    checked: list[JobDefinition[..., Any] | str] = []
    for observer in observers:
        if isinstance(observer, str):
            module, _, name = observer.partition(":")
            if not module or not name:
                raise InvalidJobDefinition(
                    f"failure observer {observer!r} of {target} must be a job or a "
                    "'package.module:function' target"
                )
        elif isinstance(observer, JobDefinition):
            try:
                observer.signature.bind("dead-job-id")
            except TypeError as error:
                raise InvalidJobDefinition(
                    f"failure observer {observer.target} of {target} must accept the dead "
                    f"job's id as its only argument: {error}"
                ) from None
        else:
            raise InvalidJobDefinition(
                f"failure observer {observer!r} of {target} is not a job; decorate it with @job"
            )
        checked.append(observer)
    return tuple(checked)


def _positive_span(value: object) -> timedelta:
    """``hard_timeout`` as a ``timedelta``: given as one, or as seconds."""
    if type(value) in (int, float) and math.isfinite(value):  # type: ignore[arg-type]
        value = timedelta(seconds=value)  # type: ignore[arg-type]
    if not isinstance(value, timedelta) or value <= timedelta(0):
        raise ValueError(
            f"hard_timeout must be a positive number of seconds or timedelta; got {value!r}"
        )
    return value


def _check_limit_key(
    target: str, signature: inspect.Signature, options: JobOptions, key: str | None
) -> str | None:
    """Refuse a ``limit_key`` that names no plain parameter, or keys no limit."""
    if key is None:
        return None
    parameter = signature.parameters.get(key) if isinstance(key, str) else None
    if parameter is None or parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
        raise InvalidJobDefinition(
            f"{target}: limit_key={key!r} must name one of its parameters "
            f"({', '.join(signature.parameters) or 'it has none'})"
        )
    if options.concurrency is None and options.rate is None:
        raise InvalidJobDefinition(
            f"{target}: limit_key={key!r} keys no limit; give concurrency= or rate= too"
        )
    return key


def _check_atomic(target: str, is_async: bool, options: JobOptions, atomic: object) -> bool:
    """Refuse ``atomic`` where the job's writes could not join the transaction: an
    async function's database calls run on other threads (other connections), and a
    hard timeout runs the function in a child process."""
    if type(atomic) is not bool:
        raise TypeError(f"{target}: atomic must be True or False; got {atomic!r}")
    if atomic and is_async:
        raise InvalidJobDefinition(
            f"{target}: atomic=True needs a plain (sync) function; an async one's "
            "database calls run on other threads, outside the job's transaction"
        )
    if atomic and options.hard_timeout is not None:
        raise InvalidJobDefinition(
            f"{target}: atomic=True cannot go with hard_timeout: the function would run "
            "in a child process, outside the job's transaction"
        )
    return atomic


def _check_name(what: str, value: str | None) -> None:
    if value is not None and (not isinstance(value, str) or not value.strip()):
        raise ValueError(f"{what} must be a non-blank string; got {value!r}")


def choice_of[E: StrEnum](kind: type[E], option: str, value: E | str) -> E:
    """``value`` as a member of ``kind`` (its value as text will do), or an error naming
    ``option`` and the choices."""
    try:
        return kind(value)
    except ValueError:
        names = ", ".join(repr(member.value) for member in kind)
        raise ValueError(f"{option} must be one of {names}; got {value!r}") from None
