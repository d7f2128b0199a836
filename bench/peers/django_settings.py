"""Django settings of the peers' processes, from the environment the peer bench sets:
``PEER_SYSTEM``, ``PEER_DB_URL`` and ``PEER_CONFIG``. The two Django drivers (``millrace``
and ``tasksdb``) install their app; Celery loads the settings alone, as in a Django
project (its Django fix-up then runs around every task)."""

from __future__ import annotations

import json
import os
from urllib.parse import unquote, urlsplit

SECRET_KEY = "peer-bench-not-secret"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

_url = urlsplit(os.environ["PEER_DB_URL"])
DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": _url.path.lstrip("/"),
        "USER": unquote(_url.username or ""),
        "PASSWORD": unquote(_url.password or ""),
        "HOST": _url.hostname or "127.0.0.1",
        "PORT": str(_url.port or ""),
    }
}

if os.environ["PEER_SYSTEM"] == "millrace":
    # The sample project's apps, templates and middleware (the dashboard needs the
    # admin), with the bench database and MILLRACE of the configuration measured.
    from testproject.settings import INSTALLED_APPS, MIDDLEWARE, ROOT_URLCONF, TEMPLATES  # noqa: F401

    MILLRACE = json.loads(os.environ.get("PEER_MILLRACE", "{}"))
    MILLRACE_DASHBOARD = {
        "AUTHORIZE": "millrace_django.dashboard.authorization.staff_with_permissions"
    }
elif os.environ["PEER_SYSTEM"] == "tasksdb":
    INSTALLED_APPS = ["django_tasks_db"]
    TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}
