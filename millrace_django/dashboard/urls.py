"""The dashboard's URLs; mount them before the admin's::

path("admin/millrace/", include("millrace_django.dashboard.urls")),
path("admin/", admin.site.urls),

Names taken from the project (queues, recurring ids, signals) use the ``path`` converter:
any configured name, ``/`` included, has a URL. The last pattern answers every other URL
under the mount, so a visitor the dashboard refuses gets the same 404 everywhere in it.
"""

from __future__ import annotations

from django.urls import path

from millrace_django.dashboard import api, catalog, endpoints, metrics, views

app_name = "millrace_dashboard"

API = "api/v1/"

urlpatterns = [
    path("", views.overview, name="overview"),
    path("jobs/", views.jobs, name="jobs"),
    path("jobs/bulk/", views.jobs_bulk, name="jobs-bulk"),
    path("jobs/<uuid:job_id>/", views.job, name="job"),
    path("jobs/<uuid:job_id>/<slug:action>/", views.job_action, name="job-action"),
    path("catalog/", catalog.catalog, name="catalog"),
    path("catalog/<path:target>/", catalog.catalog_function, name="catalog-function"),
    path("recurring/", views.recurring, name="recurring"),
    path("recurring/bulk/", views.recurring_bulk, name="recurring-bulk"),
    path(
        "recurring/<path:recurring_id>/trigger/",
        views.recurring_trigger,
        name="recurring-trigger",
    ),
    path("recurring/<path:recurring_id>/edit/", views.recurring_edit, name="recurring-edit"),
    path(
        "recurring/<path:recurring_id>/<slug:action>/",
        views.recurring_action,
        name="recurring-action",
    ),
    path("instances/", views.instances, name="instances"),
    path("instances/bulk/", views.instances_bulk, name="instances-bulk"),
    path("instances/<uuid:instance_id>/", views.instance, name="instance"),
    path(
        "instances/<uuid:instance_id>/<slug:action>/",
        views.instance_action,
        name="instance-action",
    ),
    path("signals/", views.signals, name="signals"),
    path("queues/", views.queues, name="queues"),
    path("queues/<path:queue>/<slug:action>/", views.queue_action, name="queue-action"),
    # Prometheus text exposition (see docs/observability.md).
    path("metrics", metrics.metrics, name="metrics"),
    # The JSON API (see openapi.py).
    path(f"{API}info", api.info, name="api-info"),
    path(f"{API}statistics", api.statistics, name="api-statistics"),
    path(f"{API}jobs", api.jobs, name="api-jobs"),
    path(f"{API}jobs/bulk/<slug:action>", api.jobs_bulk, name="api-jobs-bulk"),
    path(f"{API}jobs/<uuid:job_id>", api.job, name="api-job"),
    path(f"{API}jobs/<uuid:job_id>/<slug:action>", api.job_action, name="api-job-action"),
    path(f"{API}catalog", api.catalog, name="api-catalog"),
    path(f"{API}catalog/<path:target>", api.catalog_function, name="api-catalog-function"),
    path(f"{API}recurring", api.recurring, name="api-recurring"),
    path(
        f"{API}recurring/<path:recurring_id>/trigger",
        api.recurring_trigger,
        name="api-recurring-trigger",
    ),
    path(f"{API}recurring/<path:recurring_id>/edit", api.recurring_edit, name="api-recurring-edit"),
    path(
        f"{API}recurring/<path:recurring_id>/<slug:action>",
        api.recurring_action,
        name="api-recurring-action",
    ),
    path(f"{API}instances", api.instances, name="api-instances"),
    path(f"{API}instances/<uuid:instance_id>", api.instance, name="api-instance"),
    path(
        f"{API}instances/<uuid:instance_id>/recovery/<slug:action>",
        api.instance_recovery,
        name="api-instance-recovery",
    ),
    path(
        f"{API}instances/<uuid:instance_id>/cancel",
        api.instance_cancel,
        name="api-instance-cancel",
    ),
    path(
        f"{API}signals/<str:name>/<path:correlation_id>",
        api.signal,
        name="api-signal",
    ),
    path(f"{API}queues", api.queues, name="api-queues"),
    path(f"{API}queues/<path:queue>/<slug:action>", api.queue_action, name="api-queue-action"),
    path(f"{API}openapi.json", api.openapi, name="api-openapi"),
    path("<path:rest>", endpoints.unknown, name="unknown"),
]
