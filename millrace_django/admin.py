"""Millrace in the Django admin: the "Millrace" section of the admin index leads to the
dashboard.

The section lists jobs, recurring jobs and workflow instances; each opens the matching
dashboard page (and the dashboard's overview is linked from the section's own page).
Without the dashboard mounted they fall back to plain read-only admin lists. Nothing
here adds, edits or deletes rows: jobs change state only through the engine, which the
dashboard's actions use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.db.models import Model
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import NoReverseMatch, reverse

from millrace_django.dashboard.authorization import authorized
from millrace_django.models import Job, Recurring, WorkflowInstance

if TYPE_CHECKING:
    _ModelAdmin = admin.ModelAdmin[Any]
else:
    _ModelAdmin = admin.ModelAdmin


def dashboard_url(name: str, *args: Any) -> str | None:
    """The dashboard page ``name``, or ``None`` if the dashboard is not mounted."""
    try:
        return reverse(f"millrace_dashboard:{name}", args=args)
    except NoReverseMatch:
        return None


class DashboardLinkAdmin(_ModelAdmin):
    """A read-only model admin whose list and detail open the dashboard's pages."""

    dashboard_list = "overview"
    dashboard_detail: str | None = None
    show_full_result_count = False
    list_per_page = 50

    def has_module_permission(self, request: HttpRequest) -> bool:
        # The section shows only to those the dashboard's policy lets in.
        return authorized(request) and super().has_module_permission(request)

    def has_view_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return authorized(request) and super().has_view_permission(request, obj)

    def get_readonly_fields(self, request: HttpRequest, obj: Model | None = None) -> Any:
        return [field.name for field in self.model._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        target = dashboard_url(self.dashboard_list)
        if target is not None and self.has_view_permission(request):
            return HttpResponseRedirect(target)
        return super().changelist_view(request, extra_context)

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        if self.dashboard_detail is not None and self.has_view_permission(request):
            obj = self.get_object(request, object_id)
            target = dashboard_url(self.dashboard_detail, self.dashboard_id(obj)) if obj else None
            if target is not None:
                return HttpResponseRedirect(target)
        return super().change_view(request, object_id, form_url, extra_context)

    def dashboard_id(self, obj: Any) -> Any:
        return obj.pk


@admin.register(Job)
class JobAdmin(DashboardLinkAdmin):
    dashboard_list = "jobs"
    dashboard_detail = "job"
    list_display = ("uuid", "target", "queue", "state", "attempt", "created_at")
    list_filter = ("state",)
    ordering = ("-seq",)

    def dashboard_id(self, obj: Any) -> Any:
        return obj.uuid


@admin.register(Recurring)
class RecurringAdmin(DashboardLinkAdmin):
    dashboard_list = "recurring"
    list_display = ("id", "cron", "timezone", "queue", "target", "next_fire_time")
    ordering = ("next_fire_time", "id")


@admin.register(WorkflowInstance)
class WorkflowInstanceAdmin(DashboardLinkAdmin):
    dashboard_list = "instances"
    dashboard_detail = "instance"
    list_display = ("id", "definition_id", "definition_version", "state", "created_at")
    list_filter = ("state",)
    ordering = ("-created_at",)
