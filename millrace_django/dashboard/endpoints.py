"""The guard every page and API endpoint goes through, in this order:

1. authorization (policy and permission): a denial is a plain 404, before anything else
   (so an anonymous POST without a CSRF token is a 404 too, not a 403);
2. the HTTP method: actions take POST only (405 otherwise);
3. CSRF, checked here rather than by the middleware, so it comes after the 404;
4. the names in the path (a queue, a recurring id, a signal): one holding a NUL
   character is a 400, as no name can hold one (PostgreSQL refuses it in any text).

Any other URL under the mount is :func:`unknown`: the same 404 to whoever the policy
refuses, so no URL tells them where the dashboard lives.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.conf import settings
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseBadRequest,
    HttpResponseNotAllowed,
    HttpResponsePermanentRedirect,
)
from django.middleware.csrf import CsrfViewMiddleware
from django.urls import Resolver404, resolve
from django.views.decorators.csrf import csrf_exempt

from millrace_django.dashboard.authorization import Permission, authorized, require

type View = Callable[..., HttpResponse]


def _no_response(request: HttpRequest) -> HttpResponse:  # pragma: no cover - never called
    raise AssertionError("the CSRF check never calls through")


def _csrf_view(request: HttpRequest) -> HttpResponse:  # pragma: no cover - never called
    """The callback the CSRF check inspects (it carries no ``csrf_exempt``)."""
    raise AssertionError("the CSRF check never calls through")


_CSRF = CsrfViewMiddleware(_no_response)


def csrf_rejection(request: HttpRequest) -> HttpResponse | None:
    """The 403 response of a POST without a valid CSRF token, else ``None``."""
    return _CSRF.process_view(request, _csrf_view, (), {})


def _bad_path_name(kwargs: dict[str, Any]) -> str | None:
    """Why a name taken from the path cannot name anything, or ``None``."""
    for parameter, value in kwargs.items():
        if isinstance(value, str) and "\x00" in value:
            label = parameter.replace("_", " ")
            return f"The {label} in the URL contains a NUL character (%00), which no name holds."
    return None


def _plain_bad_request(detail: str) -> HttpResponse:
    return HttpResponseBadRequest(detail, content_type="text/plain; charset=utf-8")


def guarded(
    permission: Permission,
    *,
    methods: tuple[str, ...] = ("GET", "HEAD"),
    on_csrf_failure: Callable[[HttpRequest, HttpResponse], HttpResponse] | None = None,
    on_bad_request: Callable[[str], HttpResponse] = _plain_bad_request,
) -> Callable[[View], View]:
    """Wrap a view: :func:`require` ``permission``, then allow only ``methods``, then
    check CSRF on unsafe methods, then the names in the path (``on_bad_request``
    answers a bad one, given why)."""

    def decorate(view: View) -> View:
        @wraps(view)
        def wrapper(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            require(request, permission)
            if request.method not in methods:
                return HttpResponseNotAllowed(methods)
            if request.method not in ("GET", "HEAD", "OPTIONS", "TRACE"):
                rejected = csrf_rejection(request)
                if rejected is not None:
                    return on_csrf_failure(request, rejected) if on_csrf_failure else rejected
            bad = _bad_path_name(kwargs)
            if bad is not None:
                return on_bad_request(bad)
            return view(request, *args, **kwargs)

        return csrf_exempt(wrapper)

    return decorate


@csrf_exempt
def unknown(request: HttpRequest, rest: str) -> HttpResponse:
    """Every URL under the mount that no page answers: a 404. Catching them here keeps
    them from the admin's catch-all, which sends anonymous visitors to its login (and
    from ``APPEND_SLASH``, which redirects only where a page exists): both would show
    where the dashboard lives. Those the policy lets in get ``APPEND_SLASH`` here."""
    if authorized(request) and settings.APPEND_SLASH and not request.path_info.endswith("/"):
        try:
            match = resolve(f"{request.path_info}/", getattr(request, "urlconf", None))
        except Resolver404:
            pass
        else:
            if match.func is not unknown:
                return HttpResponsePermanentRedirect(request.get_full_path(force_append_slash=True))
    raise Http404("not found")
