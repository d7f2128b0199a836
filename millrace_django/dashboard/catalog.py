"""The job catalog pages: every job function with its figures (or a tag's functions and
their total), and one page per function (see
:class:`~millrace_django.contract.CatalogEntry` for where each figure comes from: never
from counting finished jobs)."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlencode

from django.http import Http404, HttpRequest, HttpResponse
from django.urls import reverse

from millrace_django.contract import CatalogEntry, JobState, TenantFilter, catalog_total
from millrace_django.dashboard import services
from millrace_django.dashboard.authorization import Permission
from millrace_django.dashboard.endpoints import guarded
from millrace_django.dashboard.filters import CatalogFilter, StatisticsFilter
from millrace_django.dashboard.views import page, tenant_query

MAX_TARGET_LENGTH = 500
"""The longest target a job stores."""


def target_problem(target: str) -> str | None:
    """Why ``target`` (from a URL) cannot name a job function, or ``None``."""
    if len(target) > MAX_TARGET_LENGTH:
        return f"A target is at most {MAX_TARGET_LENGTH} characters."
    if "\x00" in target:
        return "A target cannot contain a NUL character."
    return None


@dataclass(frozen=True, slots=True)
class StateCount:
    """One state's count of a function's jobs, with the job list showing them."""

    state: str
    count: int
    url: str


@dataclass(frozen=True, slots=True)
class TagLink:
    """One of a function's tags, with the catalog of that tag."""

    tag: str
    url: str


@dataclass(frozen=True, slots=True)
class CatalogRow:
    entry: CatalogEntry
    url: str
    jobs_url: str
    states: list[StateCount]
    tags: list[TagLink]


def _jobs_url(query: dict[str, str]) -> str:
    return f"{reverse('millrace_dashboard:jobs')}?{urlencode(query)}"


def _row(entry: CatalogEntry, tenant: TenantFilter) -> CatalogRow:
    scope = tenant_query(tenant)
    catalog_url = reverse("millrace_dashboard:catalog")
    return CatalogRow(
        entry=entry,
        url=reverse("millrace_dashboard:catalog-function", args=[entry.target])
        + (f"?{urlencode(scope)}" if scope else ""),
        jobs_url=_jobs_url({"target": entry.target, **scope}),
        states=[
            StateCount(
                state.value,
                entry.jobs_by_state.get(state, 0),
                _jobs_url({"target": entry.target, "state": state.value, **scope}),
            )
            for state in JobState
        ],
        tags=[
            TagLink(tag, f"{catalog_url}?{urlencode({'tag': tag, **scope})}") for tag in entry.tags
        ],
    )


def _refused(
    request: HttpRequest, filterset: StatisticsFilter | CatalogFilter, problem: str
) -> HttpResponse:
    return page(
        request,
        "catalog.html",
        "Job catalog",
        {"filter": filterset, "problem": problem, "rows": []},
        section="catalog",
        status=400,
    )


@guarded(Permission.VIEW_JOBS)
def catalog(request: HttpRequest) -> HttpResponse:
    """Every function's figures; with ``tag``, its functions' and their total."""
    filterset = CatalogFilter(request.GET)
    if not filterset.is_valid():
        problem = "; ".join(str(e) for errors in filterset.form.errors.values() for e in errors)
        return _refused(request, filterset, problem)
    tenant = filterset.tenant_filter()
    tag = filterset.values.get("tag") or None
    entries = services.monitoring().get_catalog(tenant, tag=tag)
    context = {
        "filter": filterset,
        "tag": tag,
        "rows": [_row(entry, tenant) for entry in entries],
        "total": None if tag is None or not entries else catalog_total(tag, entries),
        "tag_jobs_url": None if tag is None else _jobs_url({"tag": tag, **tenant_query(tenant)}),
    }
    title = "Job catalog" if tag is None else f"Job catalog: tag {tag}"
    return page(request, "catalog.html", title, context, section="catalog")


@guarded(Permission.VIEW_JOBS)
def catalog_function(request: HttpRequest, target: str) -> HttpResponse:
    filterset = StatisticsFilter(request.GET)
    problem = target_problem(target)
    if problem is not None or not filterset.is_valid():
        return _refused(request, filterset, problem or "Invalid tenant filter.")
    tenant = filterset.tenant_filter()
    entries = services.monitoring().get_catalog(tenant, target)
    if not entries:
        raise Http404(f"no jobs of {target!r}")
    row = _row(entries[0], tenant)
    return page(
        request,
        "catalog_function.html",
        target,
        {"filter": filterset, "row": row},
        section="catalog",
    )
