"""The dashboard's pages: admin look, the storage's read model, actions as POST + CSRF.

Every view is wrapped by :func:`~.endpoints.guarded` (policy, permission, method, CSRF).
Lists are keyset pages of the read model (newest first, no totals); a bad filter or
cursor renders the page with the error and status 400.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import urlencode
from uuid import UUID
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect, QueryDict
from django.shortcuts import render
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme

from millrace_django.contract import (
    CONTINUATION_CAP,
    JSON,
    TERMINAL_INSTANCE_STATES,
    TERMINAL_JOB_STATES,
    AttemptOutcome,
    InstanceState,
    JobDetails,
    JobState,
    LimitUsage,
    OverlapPolicy,
    Page,
    RecurringSummary,
    TenantFilter,
    expired_reason,
)
from millrace_django.dashboard import actions, charts, services
from millrace_django.dashboard.actions import (
    InstanceAction,
    JobAction,
    Outcome,
    QueueAction,
    RecurringAction,
)
from millrace_django.dashboard.audit import audit, listed
from millrace_django.dashboard.authorization import Permission, get_dashboard_settings, grants
from millrace_django.dashboard.endpoints import guarded
from millrace_django.dashboard.filters import (
    TARGET_SEARCH,
    InstanceFilter,
    JobFilter,
    PagingForm,
    ReadModelFilterSet,
    RecurringFilter,
    StatisticsFilter,
)
from millrace_django.dashboard.forms import (
    InstanceBulkForm,
    JobBulkForm,
    RecurringBulkForm,
    RecurringEditForm,
    SignalForm,
)
from millrace_django.dashboard.graphview import graph_svg
from millrace_django.errors import InvalidCursor

PAGE_SIZE = 25
"""Rows per list page (the API's default is the storage's, 50)."""

JOB_STATE_COLOURS = {
    "scheduled": "#7b8ca6",
    "enqueued": "#4a7fc1",
    "processing": "#2c9fb8",
    "succeeded": "#3a9a5b",
    "failed": "#d68a1e",
    "dead": "#c94a4a",
    "cancelled": "#8a8a8a",
    "awaiting": "#9b7bc4",
}


def page(
    request: HttpRequest,
    template: str,
    title: str,
    context: dict[str, Any],
    *,
    section: str,
    status: int = 200,
) -> HttpResponse:
    """Render ``template`` inside the admin's frame (header, sidebar, messages)."""
    site = get_dashboard_settings().admin_site
    full = {
        **site.each_context(request),
        "title": title,
        "section": section,
        "can": grants(request),
        "admin_index_url": reverse(f"{site.name}:index"),
        "now": services.now(),
        **context,
    }
    return render(request, f"millrace_django/dashboard/{template}", full, status=status)


def pretty(value: JSON) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False)


def _with(query: QueryDict, **changes: str | None) -> str:
    """``query`` as a query string with ``changes`` applied (``None`` removes a key)."""
    copy = query.copy()
    for key, value in changes.items():
        if value is None:
            copy.pop(key, None)
        else:
            copy[key] = value
    encoded = copy.urlencode()
    return f"?{encoded}" if encoded else "?"


def _next_url(request: HttpRequest, fallback: str) -> str:
    target = request.POST.get("next") or ""
    if target and url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return target
    return fallback


def _report(request: HttpRequest, outcome: Outcome) -> None:
    if outcome.ok:
        messages.success(request, outcome.message)
    else:
        messages.error(request, outcome.message)


@dataclass(frozen=True, slots=True)
class Listing[T]:
    """One list page with its filter, for the templates."""

    filter: ReadModelFilterSet
    items: list[T]
    next_url: str | None
    first_url: str | None
    problem: str | None
    status: int


def _listing[T](
    request: HttpRequest,
    filterset: ReadModelFilterSet,
    run: Any,
) -> Listing[T]:
    """Validate the filter and paging inputs and read one page (400 on bad input)."""
    paging = PagingForm(request.GET)
    if not filterset.is_valid() or not paging.is_valid():
        problem = "Some filters are invalid; fix them and apply again."
        if paging.errors:
            problem = "Invalid paging parameters: " + "; ".join(
                f"{field}: {' '.join(str(e) for e in errors)}"
                for field, errors in paging.errors.items()
            )
        return Listing(filterset, [], None, None, problem, 400)
    cursor, limit = paging.page(PAGE_SIZE)
    try:
        result: Page[T] = run(filterset.query(cursor=cursor, limit=limit))  # type: ignore[attr-defined]
    except InvalidCursor:
        return Listing(
            filterset,
            [],
            None,
            _with(request.GET, cursor=None),
            "Invalid paging cursor: it does not come from this list. Start again from the "
            "newest rows.",
            400,
        )
    next_url = _with(request.GET, cursor=result.next_cursor) if result.next_cursor else None
    first_url = _with(request.GET, cursor=None) if cursor else None
    return Listing(filterset, list(result.items), next_url, first_url, None, 200)


# -- overview ----------------------------------------------------------------------------


@guarded(Permission.VIEW_JOBS)
def overview(request: HttpRequest) -> HttpResponse:
    filterset = StatisticsFilter(request.GET)
    if not filterset.is_valid():
        return page(
            request,
            "overview.html",
            "Overview",
            {"filter": filterset, "problem": "Invalid tenant filter."},
            section="overview",
            status=400,
        )
    tenant = filterset.tenant_filter()
    stats = services.monitoring().get_statistics(tenant)
    scope = tenant_query(tenant)
    job_states = [
        (
            state.value,
            stats.jobs_by_state.get(state, 0),
            _jobs_url(state=state.value, **scope),
        )
        for state in JobState
    ]
    instance_states = [
        (
            state.value,
            stats.instances_by_state.get(state, 0),
            reverse("millrace_dashboard:instances") + "?" + urlencode({"state": state.value}),
        )
        for state in InstanceState
    ]
    points = services.throughput()
    return page(
        request,
        "overview.html",
        "Overview",
        {
            "filter": filterset,
            "stats": stats,
            "job_states": job_states,
            "state_chart": charts.state_bars(
                {name: count for name, count, _ in job_states}, JOB_STATE_COLOURS
            ),
            "instance_states": instance_states,
            "queues": _queue_rows(stats.enqueued_by_queue),
            "census": services.worker_census(),
            "gone_after": services.GONE_AFTER_HEARTBEATS,
            "throughput_chart": charts.throughput_chart(points) if points is not None else None,
            "provider": services.storage_provider(),
        },
        section="overview",
    )


def tenant_query(tenant: TenantFilter) -> dict[str, str]:
    """The query parameters of the filter form that select ``tenant``."""
    if tenant.scope.value == "untenanted":
        return {"untenanted": "on"}
    if tenant.tenant_id:
        return {"tenant": tenant.tenant_id}
    return {}


def _jobs_url(**params: str) -> str:
    return reverse("millrace_dashboard:jobs") + ("?" + urlencode(params) if params else "")


@dataclass(frozen=True, slots=True)
class QueueRow:
    name: str
    enqueued: int
    configured: bool
    url: str


@dataclass(frozen=True, slots=True)
class LimitRow:
    kind: str
    name: str
    usage: LimitUsage
    url: str
    """The scope's waiting jobs in the job list."""


def _limit_rows(usages: Sequence[LimitUsage]) -> list[LimitRow]:
    rows = []
    for usage in usages:
        kind, _, name = usage.scope.partition(":")
        waiting = {"queue": name} if kind == "queue" else {"target": name}
        rows.append(LimitRow(kind, name, usage, _jobs_url(**waiting, state="enqueued")))
    return rows


def _queue_rows(depths: Any, paused: frozenset[str] | None = None) -> list[QueueRow]:
    configured = set(services.configured_queues())
    names = sorted(configured | set(depths) | set(paused or ()))
    return [
        QueueRow(
            name=name,
            enqueued=depths.get(name, 0),
            configured=name in configured,
            url=_jobs_url(queue=name, state="enqueued"),
        )
        for name in names
    ]


# -- jobs ---------------------------------------------------------------------------------


@guarded(Permission.VIEW_JOBS)
def jobs(request: HttpRequest) -> HttpResponse:
    listing: Listing[Any] = _listing(
        request, JobFilter(request.GET), services.monitoring().query_jobs
    )
    return page(
        request,
        "jobs.html",
        "Jobs",
        {
            "listing": listing,
            "target_search": TARGET_SEARCH,
            "bulk_actions": [(a.value, a.value.replace("-", " ").capitalize()) for a in JobAction],
            "here": request.get_full_path(),
        },
        section="jobs",
        status=listing.status,
    )


@dataclass(frozen=True, slots=True)
class TimelineEntry:
    at: datetime
    label: str
    detail: str | None
    tone: str


def _timeline(details: JobDetails) -> list[TimelineEntry]:
    """What happened to the job, in the order it happened: created, the attempts that
    ended badly (oldest first), the attempt running now, then what comes next (its due
    time) or how it finished.

    Ordered by those steps, never by their instants: they come from two clocks (the
    worker's for ``finished_at``, the storage's for an attempt's ``recorded_at``), which
    may put a job's end a few milliseconds before its last failure was recorded.
    """
    summary = details.summary
    entries = [TimelineEntry(summary.created_at, "Created", f"queue {summary.queue}", "info")]
    for attempt in reversed(details.attempts):
        tone = "error" if attempt.outcome is AttemptOutcome.FAILED else "warning"
        worker = f" on {attempt.worker_id}" if attempt.worker_id else ""
        entries.append(
            TimelineEntry(
                attempt.recorded_at,
                f"Attempt {attempt.attempt} {attempt.outcome.value}{worker}",
                attempt.error,
                tone,
            )
        )
    if summary.state is JobState.PROCESSING:
        worker = f" on {summary.worker_id}" if summary.worker_id else ""
        until = details.lease_until or summary.created_at
        entries.append(
            TimelineEntry(
                until, f"Attempt {summary.attempt} running{worker} (lease until)", None, "info"
            )
        )
    if summary.due_at is not None:
        due = "Retry due" if summary.state is JobState.FAILED else "Due"
        entries.append(TimelineEntry(summary.due_at, due, None, "info"))
    if summary.finished_at is not None:
        tone = {"succeeded": "success", "dead": "error"}.get(summary.state.value, "info")
        entries.append(
            TimelineEntry(summary.finished_at, f"Finished: {summary.state.value}", None, tone)
        )
    return entries


def _progress_fraction(progress: JSON) -> float | None:
    if isinstance(progress, int | float) and not isinstance(progress, bool) and 0 <= progress <= 1:
        return float(progress)
    return None


def _expired(details: JobDetails) -> bool:
    """The job ended by its deadline (cancelled by the sweep, its reason stored)."""
    deadline = details.expires_at
    return (
        details.summary.state is JobState.CANCELLED
        and deadline is not None
        and details.last_error == expired_reason(deadline)
    )


@guarded(Permission.VIEW_JOBS)
def job(request: HttpRequest, job_id: UUID) -> HttpResponse:
    details = services.monitoring().get_job_details(job_id)
    if details is None:
        raise Http404(f"no job {job_id}")
    state = details.summary.state
    fraction = _progress_fraction(details.progress)
    return page(
        request,
        "job.html",
        f"Job {job_id}",
        {
            "job": details,
            "summary": details.summary,
            "arguments": pretty(
                {"args": list(details.invocation.args), "kwargs": dict(details.invocation.kwargs)}
            ),
            "result": pretty(details.result) if details.result is not None else None,
            "progress_fraction": fraction,
            "progress_percent": round(fraction * 100) if fraction is not None else None,
            "progress": pretty(details.progress) if details.progress is not None else None,
            "checkpoint": pretty(details.checkpoint) if details.checkpoint is not None else None,
            "timeline": _timeline(details),
            "continuation_cap": CONTINUATION_CAP,
            "expired": _expired(details),
            "can_cancel": state not in TERMINAL_JOB_STATES,
            "can_run_now": state in (JobState.SCHEDULED, JobState.FAILED),
            "can_requeue": state in TERMINAL_JOB_STATES,
            "state_colour": JOB_STATE_COLOURS[state.value],
        },
        section="jobs",
    )


@guarded(Permission.MANAGE_JOBS, methods=("POST",))
def job_action(request: HttpRequest, job_id: UUID, action: str) -> HttpResponse:
    try:
        chosen = JobAction(action)
    except ValueError as error:
        raise Http404(f"no action {action!r}") from error
    outcome = audit(request, chosen.value, str(job_id), actions.JOB_ACTIONS[chosen](job_id))
    _report(request, outcome)
    if chosen is JobAction.REQUEUE and outcome.ok:
        return HttpResponseRedirect(reverse("millrace_dashboard:job", args=[outcome.data["id"]]))
    if chosen is JobAction.DELETE and outcome.ok:
        return HttpResponseRedirect(reverse("millrace_dashboard:jobs"))
    return HttpResponseRedirect(
        _next_url(request, reverse("millrace_dashboard:job", args=[job_id]))
    )


@guarded(Permission.MANAGE_JOBS, methods=("POST",))
def jobs_bulk(request: HttpRequest) -> HttpResponse:
    form = JobBulkForm(request.POST)
    back = _next_url(request, reverse("millrace_dashboard:jobs"))
    if not form.is_valid():
        messages.error(request, _form_problem(form.errors))
        return HttpResponseRedirect(back)
    chosen, ids = JobAction(form.cleaned_data["action"]), form.cleaned_data["ids"]
    outcome = actions.bulk(actions.JOB_ACTIONS[chosen], ids, "job")
    _report(request, audit(request, f"bulk {chosen.value}", listed(ids), outcome))
    return HttpResponseRedirect(back)


def _form_problem(errors: Any) -> str:
    return "Nothing was done: " + "; ".join(
        f"{field}: {' '.join(str(e) for e in problems)}" for field, problems in errors.items()
    )


# -- recurring ----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RecurringRow:
    item: RecurringSummary
    next_local: str
    last_local: str | None
    overdue: bool
    skipped_local: str | None
    """When overlap ``skip`` last dropped an occurrence, in the definition's zone."""
    held: bool
    """Overlap ``queue`` holds the due occurrence until the previous job ends."""


def _in_zone(instant: datetime, zone: str) -> str:
    try:
        local = instant.astimezone(ZoneInfo(zone))
    except (ZoneInfoNotFoundError, ValueError):
        local = instant
    return local.strftime("%Y-%m-%d %H:%M %Z")


@guarded(Permission.VIEW_RECURRING)
def recurring(request: HttpRequest) -> HttpResponse:
    listing: Listing[RecurringSummary] = _listing(
        request, RecurringFilter(request.GET), services.monitoring().query_recurring
    )
    now = services.now()
    rows = [
        RecurringRow(
            item=item,
            next_local=_in_zone(item.next_fire_time, item.timezone),
            last_local=_in_zone(item.last_fire_time, item.timezone)
            if item.last_fire_time
            else None,
            overdue=item.enabled and item.next_fire_time <= now,
            skipped_local=_in_zone(item.last_skip_time, item.timezone)
            if item.last_skip_time
            else None,
            held=item.overlap is OverlapPolicy.QUEUE
            and item.next_fire_time <= now
            and item.last_outcome is not None
            and item.last_outcome not in TERMINAL_JOB_STATES,
        )
        for item in listing.items
    ]
    return page(
        request,
        "recurring.html",
        "Recurring jobs",
        {"listing": listing, "rows": rows, "here": request.get_full_path()},
        section="recurring",
        status=listing.status,
    )


@guarded(Permission.MANAGE_RECURRING, methods=("POST",))
def recurring_trigger(request: HttpRequest, recurring_id: str) -> HttpResponse:
    return _act_on_recurring(request, recurring_id, RecurringAction.TRIGGER)


@guarded(Permission.MANAGE_RECURRING, methods=("POST",))
def recurring_action(request: HttpRequest, recurring_id: str, action: str) -> HttpResponse:
    try:
        chosen = RecurringAction(action)
    except ValueError as error:
        raise Http404(f"no action {action!r}") from error
    return _act_on_recurring(request, recurring_id, chosen)


def _act_on_recurring(
    request: HttpRequest, recurring_id: str, chosen: RecurringAction
) -> HttpResponse:
    outcome = audit(
        request, chosen.value, recurring_id, actions.act_on_recurring(recurring_id, chosen)
    )
    _report(request, outcome)
    listing = reverse("millrace_dashboard:recurring")
    if chosen is RecurringAction.DELETE and outcome.ok:
        return HttpResponseRedirect(listing)
    return HttpResponseRedirect(_next_url(request, listing))


@guarded(Permission.MANAGE_RECURRING, methods=("GET", "HEAD", "POST"))
def recurring_edit(request: HttpRequest, recurring_id: str) -> HttpResponse:
    """Edit a definition's schedule and arguments; disable, enable or delete it."""
    stored = services.job_storage().get_recurring(recurring_id)
    if stored is None:
        raise Http404(f"no recurring job {recurring_id!r}")
    form = RecurringEditForm.of(stored)
    status = 200
    if request.method == "POST":
        form = RecurringEditForm(request.POST)
        if form.is_valid():
            outcome = audit(
                request,
                "edit",
                recurring_id,
                actions.edit_recurring(recurring_id, form.edit(stored)),
            )
            if outcome.ok:
                _report(request, outcome)
                return HttpResponseRedirect(reverse("millrace_dashboard:recurring"))
            form.refuse(outcome.data.get("errors") or {"": [outcome.message]})
        status = 400
    return page(
        request,
        "recurring_edit.html",
        f"Recurring job {recurring_id}",
        {"record": stored, "form": form, "here": request.get_full_path()},
        section="recurring",
        status=status,
    )


@guarded(Permission.MANAGE_RECURRING, methods=("POST",))
def recurring_bulk(request: HttpRequest) -> HttpResponse:
    form = RecurringBulkForm(request.POST)
    back = _next_url(request, reverse("millrace_dashboard:recurring"))
    if not form.is_valid():
        messages.error(request, _form_problem(form.errors))
    else:
        ids = form.cleaned_data["ids"]
        outcome = actions.bulk(actions.trigger_recurring, ids, "definition")
        _report(request, audit(request, "bulk trigger", listed(ids), outcome))
    return HttpResponseRedirect(back)


# -- workflow instances ---------------------------------------------------------------------


@guarded(Permission.VIEW_WORKFLOWS)
def instances(request: HttpRequest) -> HttpResponse:
    listing: Listing[Any] = _listing(
        request, InstanceFilter(request.GET), services.monitoring().query_instances
    )
    return page(
        request,
        "instances.html",
        "Workflow instances",
        {
            "listing": listing,
            "bulk_actions": [(a.value, a.value.capitalize()) for a in InstanceAction],
            "here": request.get_full_path(),
        },
        section="instances",
        status=listing.status,
    )


@guarded(Permission.VIEW_WORKFLOWS)
def instance(request: HttpRequest, instance_id: UUID) -> HttpResponse:
    found = services.instance_view(instance_id)
    if found is None:
        raise Http404(f"no workflow instance {instance_id}")
    record = found.record
    return page(
        request,
        "instance.html",
        f"Workflow instance {instance_id}",
        {
            "found": found,
            "record": record,
            "view": found.view,
            "data": pretty(record.data),
            "graph": graph_svg(found.graph, found.position) if found.graph is not None else None,
            "position": found.position,
            "finished": record.state in TERMINAL_INSTANCE_STATES,
            "suspended": record.state is InstanceState.SUSPENDED,
        },
        section="instances",
    )


@guarded(Permission.MANAGE_WORKFLOWS, methods=("POST",))
def instance_action(request: HttpRequest, instance_id: UUID, action: str) -> HttpResponse:
    job_id: UUID | None = None
    if request.POST.get("job_id"):
        try:
            job_id = UUID(request.POST["job_id"])
        except ValueError:
            messages.error(request, "Nothing was done: job_id is not a job id.")
            return HttpResponseRedirect(reverse("millrace_dashboard:instance", args=[instance_id]))
    outcome = actions.act_on_instance(instance_id, action, job_id)
    _report(request, audit(request, action, str(instance_id), outcome))
    return HttpResponseRedirect(
        _next_url(request, reverse("millrace_dashboard:instance", args=[instance_id]))
    )


@guarded(Permission.MANAGE_WORKFLOWS, methods=("POST",))
def instances_bulk(request: HttpRequest) -> HttpResponse:
    form = InstanceBulkForm(request.POST)
    back = _next_url(request, reverse("millrace_dashboard:instances"))
    if not form.is_valid():
        messages.error(request, _form_problem(form.errors))
        return HttpResponseRedirect(back)
    action, ids = form.cleaned_data["action"], form.cleaned_data["ids"]
    outcome = actions.bulk(lambda target: actions.act_on_instance(target, action), ids, "instance")
    _report(request, audit(request, f"bulk {action}", listed(ids), outcome))
    return HttpResponseRedirect(back)


# -- signals ------------------------------------------------------------------------------


@guarded(Permission.MANAGE_WORKFLOWS, methods=("GET", "HEAD", "POST"))
def signals(request: HttpRequest) -> HttpResponse:
    status = 200
    if request.method == "POST":
        form = SignalForm(request.POST)
        if form.is_valid():
            name, correlation_id = form.cleaned_data["name"], form.cleaned_data["correlation_id"]
            outcome = audit(
                request,
                "signal",
                f"{name}/{correlation_id}",
                actions.send_signal(name, correlation_id, form.cleaned_data["payload"]),
            )
            _report(request, outcome)
            if outcome.ok:
                return HttpResponseRedirect(reverse("millrace_dashboard:signals"))
            status = outcome.status
        else:
            status = 400
    else:
        form = SignalForm(initial=request.GET.dict())
    return page(
        request, "signals.html", "Send a signal", {"form": form}, section="signals", status=status
    )


# -- queues and workers ---------------------------------------------------------------------


@guarded(Permission.VIEW_JOBS)
def queues(request: HttpRequest) -> HttpResponse:
    stats = services.monitoring().get_statistics(TenantFilter.any())
    paused = services.paused_queues()
    return page(
        request,
        "queues.html",
        "Queues and workers",
        {
            "queues": _queue_rows(stats.enqueued_by_queue, paused),
            "paused": paused,
            "limits": _limit_rows(services.limit_usage()),
            "registry": services.worker_registry(),
            "gone_after": services.GONE_AFTER_HEARTBEATS,
        },
        section="queues",
    )


@guarded(Permission.MANAGE_JOBS, methods=("POST",))
def queue_action(request: HttpRequest, queue: str, action: str) -> HttpResponse:
    try:
        chosen = QueueAction(action)
    except ValueError as error:
        raise Http404(f"no action {action!r}") from error
    _report(request, audit(request, chosen.value, queue, actions.act_on_queue(queue, chosen)))
    return HttpResponseRedirect(_next_url(request, reverse("millrace_dashboard:queues")))
