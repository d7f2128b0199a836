"""``metrics``: the monitoring read model for Prometheus, behind the dashboard's policy.

The authorization policy decides first, and a denial is the dashboard's usual 404. A
signed-in user also needs ``view_job``, as on every page; a request the policy lets in
without a user (a scraper presenting a token your policy checks, see
docs/observability.md) needs nothing more: the figures are counts, never job data.
"""

from __future__ import annotations

from django.http import Http404, HttpRequest, HttpResponse, HttpResponseNotAllowed

from millrace_django.dashboard import services
from millrace_django.dashboard.authorization import Permission, allowed, authorized
from millrace_django.observability.prometheus import CONTENT_TYPE, collect, render


def _admitted(request: HttpRequest) -> bool:
    user = getattr(request, "user", None)
    if user is not None and user.is_authenticated:
        return allowed(request, Permission.VIEW_JOBS)
    return authorized(request)


def metrics(request: HttpRequest) -> HttpResponse:
    if not _admitted(request):
        raise Http404("not found")
    if request.method not in ("GET", "HEAD"):
        return HttpResponseNotAllowed(["GET", "HEAD"])
    families = collect(
        services.job_storage(),
        now=services.now(),
        queues=services.configured_queues(),
        gone_before=services.gone_before(),
    )
    response = HttpResponse(render(families), content_type=CONTENT_TYPE)
    response["Cache-Control"] = "no-store"
    return response
