"""Errors of the workflow engine.

Mistakes a caller can fix subclass ``TypeError``/``ValueError``/``LookupError`` like the
built-ins they resemble; each also subclasses :class:`~millrace_django.errors.MillraceError`.
"""

from __future__ import annotations

from millrace_django.errors import MillraceError


class InvalidWorkflow(MillraceError, ValueError):
    """A definition whose graph cannot run; raised when the definition is built (at
    import, so at start-up), never when an instance reaches the bad node."""


class UnknownWorkflow(MillraceError, LookupError):
    """No definition with that id (and version) is registered, nor importable."""


class InvalidWorkflowData(MillraceError, TypeError):
    """Instance data that is not a JSON object (or a dataclass turned into one)."""


class InvalidSignalPayload(MillraceError, ValueError):
    """A signal's payload does not fit what the waiting step expects; nothing was
    consumed, the instance keeps waiting."""


class WorkflowStepError(MillraceError):
    """A routing expression (condition, collection, correlation) failed on the data;
    the step that reached it fails, and retries, like an activity."""
