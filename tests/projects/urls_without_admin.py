"""A project's own URLs, none of them the admin's or the dashboard's."""

from django.http import HttpResponse
from django.urls import path

urlpatterns = [path("", lambda request: HttpResponse("home"))]
