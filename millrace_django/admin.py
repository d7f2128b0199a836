"""A read-only view of jobs in the Django admin (the richer dashboard comes later).

Jobs change state only through the engine, so nothing here adds, edits or deletes rows.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.contrib import admin
from django.http import HttpRequest

from millrace_django.models import Job

if TYPE_CHECKING:
    _ModelAdmin = admin.ModelAdmin[Job]
else:
    _ModelAdmin = admin.ModelAdmin


@admin.register(Job)
class JobAdmin(_ModelAdmin):
    list_display = ("uuid", "target", "queue", "state", "attempt", "created_at")
    list_filter = ("state", "queue")
    search_fields = ("target",)
    ordering = ("-seq",)
    show_full_result_count = False
    list_per_page = 50

    def get_readonly_fields(self, request: HttpRequest, obj: Job | None = None) -> Any:
        return [field.name for field in Job._meta.fields]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Job | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Job | None = None) -> bool:
        return False
