"""What the engine needs to know from the project's settings.

The Django edge builds the real object from ``settings``; the engine only reads these
attributes, so any object with them will do (tests use :class:`EngineSettings`).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Protocol

from millrace_django.contract import Limit, RetrySpec, queue_scope
from millrace_django.engine.invocation import MAX_ARGUMENTS_BYTES
from millrace_django.engine.retry import Retry, validate_retry


class EngineConfig(Protocol):
    """The settings the client and the outcome rules read."""

    @property
    def queues(self) -> Collection[str]:
        """Queues some node claims from; enqueueing anywhere else is refused."""
        ...

    @property
    def default_queue(self) -> str: ...

    @property
    def default_retry(self) -> RetrySpec:
        """Stored on jobs whose definition names no policy."""
        ...

    @property
    def interruption_limit(self) -> int:
        """Claims without a recorded failure tolerated before the poison-pill verdict."""
        ...

    @property
    def max_arguments_bytes(self) -> int:
        """The most a call's arguments may take as stored JSON; a larger call is refused
        at enqueue (:class:`~millrace_django.engine.errors.ArgumentsTooLarge`)."""
        ...

    @property
    def queue_limits(self) -> Mapping[str, Limit]:
        """The limit every job of a queue carries, by queue (``queue:<name>`` scopes)."""
        ...


@dataclass(frozen=True, slots=True, kw_only=True)
class EngineSettings:
    """A plain, validated :class:`EngineConfig`."""

    queues: frozenset[str] = field(default_factory=lambda: frozenset({"default"}))
    default_queue: str = "default"
    default_retry: RetrySpec = field(default_factory=lambda: Retry.exponential(5))
    interruption_limit: int = 10
    max_arguments_bytes: int = MAX_ARGUMENTS_BYTES
    queue_limits: Mapping[str, Limit] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "queues", frozenset(self.queues))
        if not self.queues or any(not isinstance(q, str) or not q.strip() for q in self.queues):
            raise ValueError(f"queues must be non-blank names; got {sorted(self.queues)!r}")
        if self.default_queue not in self.queues:
            raise ValueError(
                f"the default queue {self.default_queue!r} is not among the queues "
                f"{sorted(self.queues)!r}"
            )
        validate_retry(self.default_retry)
        if type(self.interruption_limit) is not int or self.interruption_limit < 0:
            raise ValueError(
                f"interruption_limit must be an integer >= 0; got {self.interruption_limit!r}"
            )
        if type(self.max_arguments_bytes) is not int or self.max_arguments_bytes < 1:
            raise ValueError(
                f"max_arguments_bytes must be an integer >= 1; got {self.max_arguments_bytes!r}"
            )
        object.__setattr__(self, "queue_limits", MappingProxyType(dict(self.queue_limits)))
        for queue, limit in self.queue_limits.items():
            if queue not in self.queues or limit.scope != queue_scope(queue):
                raise ValueError(f"the limit of queue {queue!r} is not that of a known queue")
