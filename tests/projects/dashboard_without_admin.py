"""A project that mounts the dashboard but has no ``django.contrib.admin``, whose look,
login and templates the dashboard's pages need: the system checks must say so."""

from tests.projects.without_admin import *  # noqa: F403

ROOT_URLCONF = "tests.projects.urls_dashboard_only"
