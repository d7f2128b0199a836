"""Settings of the sample project and the test suite (SQLite unless told otherwise)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from urllib.parse import parse_qsl, unquote, urlsplit

BASE_DIR = Path(__file__).resolve().parent
SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "millrace-sample-not-secret")
DEBUG = os.environ.get("DJANGO_DEBUG", "1") == "1"
ALLOWED_HOSTS = ["localhost", "127.0.0.1", "[::1]"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "millrace_django",
    "testproject.sample",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]

ROOT_URLCONF = "testproject.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]

# Test databases are named per process, so concurrent test runs on one machine (and one
# set of throwaway servers) never drop each other's databases. The SQLite one is a file:
# the conformance kit's racer threads each open their own connection to it.
_TEST_SUFFIX = f"{os.getpid()}"

DATABASES: dict[str, dict[str, object]] = {
    "default": {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": os.environ.get("MILLRACE_SQLITE_PATH", str(BASE_DIR.parent / "db.sqlite3")),
        "OPTIONS": {
            "transaction_mode": "IMMEDIATE",
            "timeout": 30,
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL",
        },
        "TEST": {
            "NAME": str(Path(tempfile.gettempdir()) / f"millrace-test-{_TEST_SUFFIX}.sqlite3")
        },
    }
}


def _server_database(url: str) -> dict[str, object]:
    """A DATABASES entry from a ``postgres://``, ``mysql://`` or ``mssql://`` URL (the
    test servers). An ``mssql://`` URL's query names the ODBC driver (``driver=``, ODBC
    Driver 18 by default); its other query parameters go into the connection string."""
    parts = urlsplit(url)
    engine = {
        "postgres": "django.db.backends.postgresql",
        "postgresql": "django.db.backends.postgresql",
        "mysql": "django.db.backends.mysql",
        "mariadb": "django.db.backends.mysql",
        "mssql": "mssql",
        "sqlserver": "mssql",
    }[parts.scheme]
    entry: dict[str, object] = {
        "ENGINE": engine,
        "NAME": parts.path.lstrip("/"),
        "USER": unquote(parts.username or ""),
        "PASSWORD": unquote(parts.password or ""),
        "HOST": parts.hostname or "",
        "PORT": str(parts.port or ""),
        "TEST": {"NAME": f"test_{parts.path.lstrip('/')}_{_TEST_SUFFIX}", "DEPENDENCIES": []},
    }
    if engine.endswith("mysql"):
        entry["OPTIONS"] = {"charset": "utf8mb4", "isolation_level": "read committed"}
    if engine == "mssql":
        query = dict(parse_qsl(parts.query))
        entry["OPTIONS"] = {
            "driver": query.pop("driver", "ODBC Driver 18 for SQL Server"),
            "extra_params": ";".join(f"{key}={value}" for key, value in query.items()),
        }
    return entry


# The demo runs durably on PostgreSQL (or MariaDB) when given a URL, e.g.
#   MILLRACE_DATABASE_URL=postgres://user:password@127.0.0.1:5432/millrace make demo
if os.environ.get("MILLRACE_DATABASE_URL"):
    DATABASES["default"] = _server_database(os.environ["MILLRACE_DATABASE_URL"])

# The job storage may live in its own alias; the test suite binds the kit to each of these.
for _alias, _variable in (
    ("postgres", "MILLRACE_TEST_POSTGRES_URL"),
    ("mariadb", "MILLRACE_TEST_MARIADB_URL"),
    ("sqlserver", "MILLRACE_TEST_SQLSERVER_URL"),
):
    if os.environ.get(_variable):
        DATABASES[_alias] = _server_database(os.environ[_variable])

# Tuned for watching the demo: a one-second heartbeat notices a cancel request within a
# second, idle workers poll at least every second, and Ctrl-C gives running jobs 3 s to
# finish. The lease covers a heartbeat plus SQLite's 30 s busy timeout (a system check
# says so). Production keeps the defaults (docs/operating-workers.md).
MILLRACE = {
    "QUEUES": ["default", "emails", "reports"],
    "LEASE": 60,
    "HEARTBEAT": 1,
    "POLL_MAX": 1,
    "SCHEDULER_INTERVAL": 0.5,
    "SHUTDOWN_TIMEOUT": 3,
}

# Django's own ``@task`` functions run on Millrace too (docs/django-tasks.md).
TASKS = {
    "default": {
        "BACKEND": "millrace_django.tasks_backend.MillraceBackend",
        "QUEUES": ["default", "emails", "reports"],
    }
}

USE_TZ = True
TIME_ZONE = "UTC"
STATIC_URL = "static/"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
