from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    # The Millrace dashboard sits inside the admin's URL space, before the admin's own.
    path("admin/millrace/", include("millrace_django.dashboard.urls")),
    path("admin/", admin.site.urls),
]
