from django.urls import include, path

urlpatterns = [path("ops/millrace/", include("millrace_django.dashboard.urls"))]
