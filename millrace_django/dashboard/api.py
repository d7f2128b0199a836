"""The JSON API (``api/v1/``): the pages' read model and actions, same authorization.

Lists are keyset pages (``{"items": [...], "nextCursor": ...}``, no totals). Errors are
RFC 9457 problem documents: 400 for a bad filter or cursor, 404 for nothing to act on,
409 for a requeue of an unfinished job. A denied request is the same 404 as an unknown
URL. Actions are POST and need the CSRF token (header ``X-CSRFToken``) like any Django
form. The schema is served at ``api/v1/openapi.json`` (:mod:`.openapi`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any
from uuid import UUID

from django.http import HttpRequest, HttpResponse, JsonResponse, QueryDict

from millrace_django.contract import Page, TenantFilter, catalog_total
from millrace_django.dashboard import actions, services, wire
from millrace_django.dashboard.actions import JobAction, Outcome, QueueAction, RecurringAction
from millrace_django.dashboard.audit import audit, listed
from millrace_django.dashboard.authorization import Permission
from millrace_django.dashboard.catalog import target_problem
from millrace_django.dashboard.endpoints import guarded
from millrace_django.dashboard.filters import (
    CatalogFilter,
    InstanceFilter,
    JobFilter,
    PagingForm,
    ReadModelFilterSet,
    RecurringFilter,
    StatisticsFilter,
)
from millrace_django.dashboard.forms import MAX_BULK
from millrace_django.errors import InvalidCursor

API_VERSION = "v1"

RENAMED = {
    "createdAfter": "created_after",
    "createdBefore": "created_before",
    "targetContains": "target_contains",
    "definitionId": "definition",
    "definitionVersion": "version",
}
"""API query parameters (camelCase) and the filter fields they feed."""

PROBLEM = "application/problem+json"


def problem(status: int, title: str, detail: str | None = None, **extra: Any) -> JsonResponse:
    return JsonResponse(
        wire.problem(status, title, detail, **extra), status=status, content_type=PROBLEM
    )


def _csrf_problem(request: HttpRequest, rejected: HttpResponse) -> HttpResponse:
    return problem(
        403, "CSRF check failed", "Send the CSRF token in the X-CSRFToken header (and its cookie)."
    )


def _bad_path_problem(detail: str) -> HttpResponse:
    return problem(400, "Invalid path parameter", detail)


def _api(permission: Permission, *, post: bool = False) -> Callable[[Any], Any]:
    methods = ("POST",) if post else ("GET", "HEAD")
    return guarded(
        permission,
        methods=methods,
        on_csrf_failure=_csrf_problem,
        on_bad_request=_bad_path_problem,
    )


def _outcome(outcome: Outcome) -> JsonResponse:
    if outcome.ok:
        return JsonResponse({"message": outcome.message, **outcome.data}, status=outcome.status)
    title = {400: "Bad request", 404: "Not found", 409: "Conflict"}.get(outcome.status, "Refused")
    return problem(outcome.status, title, outcome.message, **outcome.data)


def _filter_data(query: QueryDict) -> QueryDict:
    data = QueryDict(mutable=True)
    for key, values in query.lists():
        if key in ("cursor", "limit"):
            continue
        data.setlist(RENAMED.get(key, key), values)
    return data


def _page[T](
    request: HttpRequest,
    filterset: ReadModelFilterSet,
    run: Callable[[Any], Page[T]],
    item: Callable[[T], dict[str, Any]],
) -> JsonResponse:
    paging = PagingForm(request.GET)
    if not filterset.is_valid() or not paging.is_valid():
        errors = {
            **wire.form_errors(filterset.form.errors, RENAMED),
            **wire.form_errors(paging.errors, {}),
        }
        return problem(400, "Invalid query parameters", errors=errors)
    cursor, limit = paging.page(0)
    try:
        result = run(filterset.query(cursor=cursor, limit=limit))  # type: ignore[attr-defined]
    except InvalidCursor:
        return problem(400, "Invalid paging cursor", "Start again without a cursor.")
    return JsonResponse(wire.page(result, item))


# -- reads --------------------------------------------------------------------------------


@_api(Permission.VIEW_JOBS)
def info(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"apiVersion": API_VERSION, "storageProvider": services.storage_provider()})


@_api(Permission.VIEW_JOBS)
def statistics(request: HttpRequest) -> JsonResponse:
    filterset = StatisticsFilter(_filter_data(request.GET))
    if not filterset.is_valid():
        errors = wire.form_errors(filterset.form.errors, RENAMED)
        return problem(400, "Invalid query parameters", errors=errors)
    stats = services.monitoring().get_statistics(filterset.tenant_filter())
    return JsonResponse(wire.statistics(stats))


@_api(Permission.VIEW_JOBS)
def catalog(request: HttpRequest) -> JsonResponse:
    return _catalog(request, None)


@_api(Permission.VIEW_JOBS)
def catalog_function(request: HttpRequest, target: str) -> HttpResponse:
    bad_target = target_problem(target)
    if bad_target is not None:
        return _bad_path_problem(bad_target)
    return _catalog(request, target)


def _catalog(request: HttpRequest, target: str | None) -> JsonResponse:
    """Every function's catalog entry (with ``tag``, its functions' and their total), or
    ``target``'s alone (a 404 if it has none)."""
    filterset = (StatisticsFilter if target else CatalogFilter)(_filter_data(request.GET))
    if not filterset.is_valid():
        errors = wire.form_errors(filterset.form.errors, RENAMED)
        return problem(400, "Invalid query parameters", errors=errors)
    tag = filterset.values.get("tag") or None
    entries = services.monitoring().get_catalog(filterset.tenant_filter(), target, tag)
    if target is None:
        body: dict[str, Any] = {"items": [wire.catalog_entry(entry) for entry in entries]}
        if tag is not None:
            body["total"] = wire.catalog_entry(catalog_total(tag, entries))
        return JsonResponse(body)
    if not entries:
        return problem(404, "Not found", f"No job of {target!r} is stored.")
    return JsonResponse(wire.catalog_entry(entries[0]))


@_api(Permission.VIEW_JOBS)
def jobs(request: HttpRequest) -> JsonResponse:
    return _page(
        request,
        JobFilter(_filter_data(request.GET)),
        services.monitoring().query_jobs,
        wire.job_summary,
    )


@_api(Permission.VIEW_JOBS)
def job(request: HttpRequest, job_id: UUID) -> JsonResponse:
    details = services.monitoring().get_job_details(job_id)
    if details is None:
        return problem(404, "Not found", f"There is no job {job_id}.")
    return JsonResponse(wire.job_details(details))


@_api(Permission.VIEW_RECURRING)
def recurring(request: HttpRequest) -> JsonResponse:
    return _page(
        request,
        RecurringFilter(_filter_data(request.GET)),
        services.monitoring().query_recurring,
        wire.recurring_summary,
    )


@_api(Permission.VIEW_WORKFLOWS)
def instances(request: HttpRequest) -> JsonResponse:
    return _page(
        request,
        InstanceFilter(_filter_data(request.GET)),
        services.monitoring().query_instances,
        wire.instance_summary,
    )


@_api(Permission.VIEW_WORKFLOWS)
def instance(request: HttpRequest, instance_id: UUID) -> JsonResponse:
    found = services.instance_view(instance_id)
    if found is None:
        return problem(404, "Not found", f"There is no workflow instance {instance_id}.")
    return JsonResponse({**wire.instance_details(found), "graph": found.graph})


# -- actions ------------------------------------------------------------------------------


@_api(Permission.MANAGE_JOBS, post=True)
def job_action(request: HttpRequest, job_id: UUID, action: str) -> JsonResponse:
    try:
        chosen = JobAction(action)
    except ValueError:
        return problem(404, "Not found", f"No job action {action!r}.")
    return _outcome(audit(request, chosen.value, str(job_id), actions.JOB_ACTIONS[chosen](job_id)))


def _json_body(request: HttpRequest) -> tuple[Any, JsonResponse | None]:
    raw = request.body.decode("utf-8", errors="replace")
    if not raw.strip():
        return None, None
    try:
        return wire.read_json(raw), None
    except ValueError as error:
        return None, problem(400, "Invalid JSON body", str(error))


@_api(Permission.MANAGE_JOBS, post=True)
def jobs_bulk(request: HttpRequest, action: str) -> JsonResponse:
    try:
        chosen = JobAction(action)
    except ValueError:
        return problem(404, "Not found", f"No job action {action!r}.")
    body, error = _json_body(request)
    if error is not None:
        return error
    ids = _uuid_list(body)
    if ids is None:
        return problem(400, "Invalid body", f'Send {{"ids": [job ids]}}, at most {MAX_BULK}.')
    outcome = actions.bulk(actions.JOB_ACTIONS[chosen], ids, "job")
    return _outcome(audit(request, f"bulk {chosen.value}", listed(ids), outcome))


def _uuid_list(body: Any) -> list[UUID] | None:
    if not isinstance(body, Mapping) or not isinstance(body.get("ids"), list):
        return None
    raw = body["ids"]
    if not raw or len(raw) > MAX_BULK or not all(isinstance(i, str) for i in raw):
        return None
    try:
        return list(dict.fromkeys(UUID(i) for i in raw))
    except ValueError:
        return None


@_api(Permission.MANAGE_RECURRING, post=True)
def recurring_trigger(request: HttpRequest, recurring_id: str) -> JsonResponse:
    return _outcome(
        audit(request, "trigger", recurring_id, actions.trigger_recurring(recurring_id))
    )


@_api(Permission.MANAGE_RECURRING, post=True)
def recurring_action(request: HttpRequest, recurring_id: str, action: str) -> JsonResponse:
    try:
        chosen = RecurringAction(action)
    except ValueError:
        return problem(404, "Not found", f"No recurring action {action!r}.")
    outcome = actions.act_on_recurring(recurring_id, chosen)
    return _outcome(audit(request, chosen.value, recurring_id, outcome))


EDITABLE: dict[str, tuple[type, str]] = {
    "cron": (str, "a string"),
    "timezone": (str, "a string"),
    "args": (list, "a list"),
    "kwargs": (dict, "an object"),
}
"""The fields of an edit's body and the JSON type of each."""


@_api(Permission.MANAGE_RECURRING, post=True)
def recurring_edit(request: HttpRequest, recurring_id: str) -> JsonResponse:
    body, error = _json_body(request)
    if error is not None:
        return error
    if not isinstance(body, Mapping) or not body or set(body) - set(EDITABLE):
        return problem(
            400, "Invalid body", f"Send a JSON object with any of {', '.join(EDITABLE)}."
        )
    wrong = {
        name: [f"{name} must be {described}"]
        for name, (kind, described) in EDITABLE.items()
        if name in body and not isinstance(body[name], kind)
    }
    if wrong:
        return problem(400, "Invalid body", "Some fields have the wrong type.", errors=wrong)
    edit = actions.RecurringEdit(**{name: body[name] for name in EDITABLE if name in body})
    return _outcome(
        audit(request, "edit", recurring_id, actions.edit_recurring(recurring_id, edit))
    )


@_api(Permission.MANAGE_WORKFLOWS, post=True)
def instance_recovery(request: HttpRequest, instance_id: UUID, action: str) -> JsonResponse:
    if action.lower() == "cancel":
        return problem(400, "Bad request", "Use retry, skip or abandon; cancel has its own URL.")
    body, error = _json_body(request)
    if error is not None:
        return error
    job_id: UUID | None = None
    if isinstance(body, Mapping) and body.get("jobId") is not None:
        try:
            job_id = UUID(str(body["jobId"]))
        except ValueError:
            return problem(400, "Bad request", "jobId is not a job id.")
    outcome = actions.act_on_instance(instance_id, action, job_id)
    return _outcome(audit(request, action, str(instance_id), outcome))


@_api(Permission.MANAGE_WORKFLOWS, post=True)
def instance_cancel(request: HttpRequest, instance_id: UUID) -> JsonResponse:
    outcome = actions.act_on_instance(instance_id, "cancel")
    return _outcome(audit(request, "cancel", str(instance_id), outcome))


@_api(Permission.MANAGE_WORKFLOWS, post=True)
def signal(request: HttpRequest, name: str, correlation_id: str) -> JsonResponse:
    payload, error = _json_body(request)
    if error is not None:
        return error
    outcome = actions.send_signal(name, correlation_id, payload)
    return _outcome(audit(request, "signal", f"{name}/{correlation_id}", outcome))


@_api(Permission.VIEW_JOBS)
def queues(request: HttpRequest) -> JsonResponse:
    stats = services.monitoring().get_statistics(TenantFilter.any())
    paused = services.paused_queues()
    registry = services.worker_registry()
    names = sorted(
        set(stats.enqueued_by_queue) | set(services.configured_queues()) | set(paused or ())
    )
    return JsonResponse(
        {
            "queues": [
                {
                    "name": name,
                    "enqueued": stats.enqueued_by_queue.get(name, 0),
                    "paused": None if paused is None else name in paused,
                }
                for name in names
            ],
            "workers": None
            if registry is None
            else [wire.registered_worker(worker) for worker in registry],
            "limits": [wire.limit_usage(usage) for usage in services.limit_usage()],
        }
    )


@_api(Permission.MANAGE_JOBS, post=True)
def queue_action(request: HttpRequest, queue: str, action: str) -> JsonResponse:
    try:
        chosen = QueueAction(action)
    except ValueError:
        return problem(404, "Not found", f"No queue action {action!r}.")
    return _outcome(audit(request, chosen.value, queue, actions.act_on_queue(queue, chosen)))


@_api(Permission.VIEW_JOBS)
def openapi(request: HttpRequest) -> JsonResponse:
    from millrace_django.dashboard.openapi import schema

    return JsonResponse(schema(request.build_absolute_uri("./")))
