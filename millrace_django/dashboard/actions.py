"""Operator actions, shared by the pages and the API. Each goes through the engine's
job or workflow client (never a row edit) and answers with an :class:`Outcome`: an HTTP
status for the API and a sentence for the operator that says why when it was refused.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any
from uuid import UUID

from millrace_django.contract import TERMINAL_INSTANCE_STATES, JobState
from millrace_django.dashboard import services
from millrace_django.engine.client import JobClient
from millrace_django.engine.errors import (
    ArgumentsTooLarge,
    InvalidCron,
    InvalidJobArguments,
    JobNotFinished,
    UnknownTimezone,
    UnresolvableTarget,
)
from millrace_django.engine.workflow import InvalidSignalPayload, Recovery
from millrace_django.errors import MillraceError


@dataclass(frozen=True, slots=True)
class Outcome:
    ok: bool
    status: int
    """200 done, 202 accepted (carried out by a job), 400 bad input, 404 nothing to act
    on (unknown, or in a state the action does not apply to), 409 not finished."""
    message: str
    data: dict[str, Any] = field(default_factory=dict)


class JobAction(StrEnum):
    CANCEL = "cancel"
    RUN_NOW = "run-now"
    REQUEUE = "requeue"
    DELETE = "delete"


class QueueAction(StrEnum):
    PAUSE = "pause"
    RESUME = "resume"


class InstanceAction(StrEnum):
    RETRY = "retry"
    SKIP = "skip"
    ABANDON = "abandon"
    CANCEL = "cancel"


def _state_of(job_id: UUID) -> JobState | None:
    details = services.monitoring().get_job_details(job_id)
    return details.summary.state if details is not None else None


def _unknown_job(job_id: UUID) -> Outcome:
    return Outcome(False, 404, f"There is no job {job_id}.")


def cancel_job(job_id: UUID) -> Outcome:
    if services.jobs().cancel(job_id):
        details = services.monitoring().get_job_details(job_id)
        if details is not None and details.summary.state is JobState.PROCESSING:
            return Outcome(
                True,
                200,
                f"Cancellation requested for job {job_id}: it is running, and its worker "
                "stops it at the next heartbeat.",
            )
        return Outcome(True, 200, f"Job {job_id} cancelled.")
    state = _state_of(job_id)
    if state is None:
        return _unknown_job(job_id)
    return Outcome(
        False, 404, f"Job {job_id} is already {state.value}: only unfinished jobs can be cancelled."
    )


def run_job_now(job_id: UUID) -> Outcome:
    if services.jobs().run_now(job_id):
        return Outcome(
            True, 200, f"Job {job_id} is enqueued to run now (it was waiting for its due time)."
        )
    state = _state_of(job_id)
    if state is None:
        return _unknown_job(job_id)
    return Outcome(
        False,
        404,
        f"Job {job_id} is {state.value}: only a scheduled job, or a failed one waiting for "
        "its retry, can run now.",
    )


def requeue_job(job_id: UUID) -> Outcome:
    try:
        new_id = services.jobs().requeue(job_id)
    except JobNotFinished:
        state = _state_of(job_id)
        shown = state.value if state is not None else "not finished"
        return Outcome(
            False,
            409,
            f"Job {job_id} is {shown}: only finished jobs (succeeded, dead or cancelled) can "
            "be requeued.",
        )
    if new_id is None:
        return _unknown_job(job_id)
    if new_id == job_id:  # pragma: no cover - requeue always mints a new id
        return Outcome(False, 409, f"Job {job_id} was not requeued.")
    return Outcome(True, 200, f"Job {job_id} requeued as job {new_id}.", {"id": str(new_id)})


def delete_job(job_id: UUID) -> Outcome:
    if services.job_storage().delete_job(job_id):
        return Outcome(True, 200, f"Job {job_id} deleted, with its history and logs.")
    state = _state_of(job_id)
    if state is None:
        return _unknown_job(job_id)
    return Outcome(
        False,
        409,
        f"Job {job_id} is {state.value}: only finished jobs (succeeded, dead or cancelled) can "
        "be deleted.",
    )


JOB_ACTIONS: dict[JobAction, Callable[[UUID], Outcome]] = {
    JobAction.CANCEL: cancel_job,
    JobAction.RUN_NOW: run_job_now,
    JobAction.REQUEUE: requeue_job,
    JobAction.DELETE: delete_job,
}


def act_on_queue(queue: str, action: QueueAction) -> Outcome:
    """Pause or resume ``queue`` (idempotent; any queue name, configured here or not)."""
    if not queue.strip() or len(queue) > 200:
        return Outcome(False, 400, "A queue name is 1 to 200 characters.")
    storage = services.job_storage()
    if action is QueueAction.PAUSE:
        storage.pause_queue(queue)
        return Outcome(
            True,
            200,
            f"Queue {queue!r} paused: workers stop claiming its jobs at their next poll; "
            "running jobs finish as usual.",
        )
    storage.resume_queue(queue)
    return Outcome(True, 200, f"Queue {queue!r} resumed: its jobs are claimable again.")


class RecurringAction(StrEnum):
    TRIGGER = "trigger"
    DISABLE = "disable"
    ENABLE = "enable"
    DELETE = "delete"


def _unknown_recurring(recurring_id: str) -> Outcome:
    return Outcome(False, 404, f"There is no recurring job {recurring_id!r}.")


_RECURRING_DONE: dict[RecurringAction, tuple[Callable[[JobClient, str], bool], str]] = {
    RecurringAction.TRIGGER: (
        JobClient.trigger_recurring,
        "triggered: one extra occurrence is enqueued; its schedule is unchanged.",
    ),
    RecurringAction.DISABLE: (
        JobClient.disable_recurring,
        "disabled: it does not fire until it is enabled, and the occurrences it misses "
        "meanwhile are dropped.",
    ),
    RecurringAction.ENABLE: (
        JobClient.enable_recurring,
        "enabled: it fires at its next occurrence.",
    ),
    RecurringAction.DELETE: (
        JobClient.remove_recurring,
        "deleted; the jobs it fired are kept. A deploy that upserts it creates it again.",
    ),
}
"""The client's method behind each action on a definition, and what its success says."""


def act_on_recurring(recurring_id: str, action: RecurringAction) -> Outcome:
    method, done = _RECURRING_DONE[action]
    try:
        acted = method(services.jobs(), recurring_id)
    except InvalidCron as error:  # stored by an older version that parsed it
        return Outcome(
            False,
            409,
            f"Recurring job {recurring_id!r} has a schedule that no longer parses "
            f"({error}): edit its cron first.",
        )
    if acted:
        return Outcome(True, 200, f"Recurring job {recurring_id!r} {done}")
    return _unknown_recurring(recurring_id)


def trigger_recurring(recurring_id: str) -> Outcome:
    return act_on_recurring(recurring_id, RecurringAction.TRIGGER)


@dataclass(frozen=True, slots=True, kw_only=True)
class RecurringEdit:
    """What an operator changes in a definition; ``None`` keeps the stored value.
    ``args``/``kwargs``: given either, they replace the stored arguments whole."""

    cron: str | None = None
    timezone: str | None = None
    args: list[Any] | None = None
    kwargs: dict[str, Any] | None = None


def _edit_refusal(error: Exception) -> tuple[str, str]:
    """The field an edit's validation error concerns, and the operator's sentence."""
    if isinstance(error, UnknownTimezone):
        return "timezone", str(error)
    if isinstance(error, InvalidCron):
        return "cron", str(error)
    if isinstance(error, UnresolvableTarget):
        return "arguments", f"The job function cannot be loaded to check them: {error}"
    return "arguments", str(error)


def edit_recurring(recurring_id: str, edit: RecurringEdit) -> Outcome:
    """Change a definition's schedule or arguments; a refusal names the field
    (``data["errors"]``) and changes nothing."""
    try:
        found = services.jobs().edit_recurring(
            recurring_id, cron=edit.cron, timezone=edit.timezone, args=edit.args, kwargs=edit.kwargs
        )
    except (InvalidCron, InvalidJobArguments, ArgumentsTooLarge, UnresolvableTarget) as error:
        field_name, message = _edit_refusal(error)
        return Outcome(
            False, 400, f"Nothing was changed: {message}", {"errors": {field_name: [message]}}
        )
    if not found:
        return _unknown_recurring(recurring_id)
    return Outcome(
        True,
        200,
        f"Recurring job {recurring_id!r} saved; a changed schedule fires next after now. "
        "A deploy that upserts it from code overwrites the edit.",
    )


def act_on_instance(instance_id: UUID, action: str, job_id: UUID | None = None) -> Outcome:
    try:
        chosen = InstanceAction(action.lower())
    except ValueError:
        return Outcome(
            False,
            400,
            f"Unknown action {action!r}: use retry, skip or abandon (or cancel).",
        )
    client = services.workflows()
    if chosen is InstanceAction.CANCEL:
        if client.cancel(instance_id):
            return Outcome(
                True,
                200,
                f"Workflow instance {instance_id} cancelled: its pending jobs are cancelled "
                "(running ones asked to stop) and its waits removed.",
            )
        return _not_actionable(instance_id, "only an unfinished instance can be cancelled")
    if client.recover(instance_id, Recovery(chosen.value), job_id=job_id):
        return Outcome(
            True,
            202,
            f"Recovery '{chosen.value}' of workflow instance {instance_id} accepted: a job "
            "carries it out.",
        )
    return _not_actionable(instance_id, "only a suspended instance with a failure can be recovered")


def _not_actionable(instance_id: UUID, rule: str) -> Outcome:
    record = services.workflows().storage.get_instance(instance_id)
    if record is None:
        return Outcome(False, 404, f"There is no workflow instance {instance_id}.")
    finished = " (finished)" if record.state in TERMINAL_INSTANCE_STATES else ""
    return Outcome(
        False, 404, f"Workflow instance {instance_id} is {record.state.value}{finished}: {rule}."
    )


def send_signal(name: str, correlation_id: str, payload: Any) -> Outcome:
    try:
        delivered = services.workflows().signal(name, correlation_id, payload)
    except InvalidSignalPayload as error:
        return Outcome(False, 400, f"The payload does not fit the waiting step: {error}")
    except (TypeError, ValueError) as error:
        return Outcome(False, 400, str(error))
    if delivered:
        return Outcome(
            True,
            200,
            f"Signal {name!r} delivered to the instance waiting on correlation id "
            f"{correlation_id!r}.",
        )
    return Outcome(
        False,
        404,
        f"No workflow instance is waiting for signal {name!r} with correlation id "
        f"{correlation_id!r}.",
    )


def bulk(act: Callable[[Any], Outcome], targets: Iterable[Any], noun: str) -> Outcome:
    """Run ``act`` on each target; one summary (done, refused with their reasons)."""
    outcomes = []
    for target in targets:
        try:
            outcomes.append((target, act(target)))
        except MillraceError as error:  # pragma: no cover - actions map their refusals
            outcomes.append((target, Outcome(False, 400, str(error))))
    if not outcomes:
        return Outcome(False, 400, f"Select at least one {noun}.")
    done = [target for target, outcome in outcomes if outcome.ok]
    refused = [(target, outcome) for target, outcome in outcomes if not outcome.ok]
    parts = [f"{len(done)} of {len(outcomes)} {noun}(s) done."]
    parts += [outcome.message for _, outcome in refused[:5]]
    if len(refused) > 5:
        parts.append(f"... and {len(refused) - 5} more refused.")
    return Outcome(
        not refused,
        200,
        " ".join(parts),
        {
            "done": [str(t) for t in done],
            "refused": [
                {"id": str(t), "reason": o.message, "status": o.status} for t, o in refused
            ],
        },
    )
