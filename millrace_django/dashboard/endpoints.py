"""The guard every page and API endpoint goes through, in this order:

1. authorization (policy and permission): a denial is a plain 404, before anything else
   (so an anonymous POST without a CSRF token is a 404 too, not a 403);
2. the HTTP method: actions take POST only (405 otherwise);
3. CSRF, checked here rather than by the middleware, so it comes after the 404.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import Any

from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed
from django.middleware.csrf import CsrfViewMiddleware
from django.views.decorators.csrf import csrf_exempt

from millrace_django.dashboard.authorization import Permission, require

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


def guarded(
    permission: Permission,
    *,
    methods: tuple[str, ...] = ("GET", "HEAD"),
    on_csrf_failure: Callable[[HttpRequest, HttpResponse], HttpResponse] | None = None,
) -> Callable[[View], View]:
    """Wrap a view: :func:`require` ``permission``, then allow only ``methods``, then
    check CSRF on unsafe methods."""

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
            return view(request, *args, **kwargs)

        return csrf_exempt(wrapper)

    return decorate
