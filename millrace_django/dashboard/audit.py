"""The audit trail of operator actions: one log line per action taken from a page or the
API, saying who did what to which target and how it ended.

Lines go to the ``millrace_django.audit`` logger at INFO (route it where your audit logs
go); the same facts ride on the record as ``extra`` fields, so a JSON formatter prints
them as keys.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from django.http import HttpRequest

from millrace_django.dashboard.actions import Outcome

logger = logging.getLogger("millrace_django.audit")


def actor(request: HttpRequest) -> str:
    """Who acted: the user's name, or ``anonymous`` (a policy may let one in)."""
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return "anonymous"
    return str(user.get_username())


def audit(request: HttpRequest, action: str, target: str, outcome: Outcome) -> Outcome:
    """Log ``action`` on ``target`` by the request's user with its outcome; returns the
    outcome, so a view can wrap the call it reports."""
    who = actor(request)
    logger.info(
        "%s %s %s: %s %s",
        who,
        action,
        target,
        outcome.status,
        outcome.message,
        extra={
            "millrace_actor": who,
            "millrace_action": action,
            "millrace_target": target,
            "millrace_status": outcome.status,
            "millrace_via": "api" if "/api/" in request.path else "page",
        },
    )
    return outcome


def listed(targets: Iterable[object]) -> str:
    """The targets of a bulk action, as one audit target."""
    return ", ".join(map(str, targets))
