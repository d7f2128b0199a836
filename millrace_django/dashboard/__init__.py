"""The monitoring dashboard: admin-integrated pages, operator actions and a JSON API.

Mount it next to the admin, before ``admin.site.urls``::

    urlpatterns = [
        path("admin/millrace/", include("millrace_django.dashboard.urls")),
        path("admin/", admin.site.urls),
    ]

Every page and API call reads the storage's monitoring read model, and every operator
action goes through the engine's clients, never a raw row edit. Access is decided by
the policy in ``settings.MILLRACE_DASHBOARD`` (see :mod:`.authorization`); anything
denied answers 404. See ``docs/dashboard.md``.
"""
