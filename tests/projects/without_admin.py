"""The sample project without ``django.contrib.admin`` (and so without the dashboard,
which lives inside the admin): jobs and workers need neither."""

from testproject.settings import *  # noqa: F403
from testproject.settings import INSTALLED_APPS as _SAMPLE_APPS

INSTALLED_APPS = [app for app in _SAMPLE_APPS if app != "django.contrib.admin"]
ROOT_URLCONF = "tests.projects.urls_without_admin"
