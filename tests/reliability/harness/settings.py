"""Django settings of the processes the reliability harness starts.

The sample project's settings with the default database pointed at
``MILLRACE_RELIABILITY_DATABASE_URL``; ``MILLRACE`` updated from the JSON object in
``MILLRACE_RELIABILITY_SETTINGS`` and the database entry from the JSON object in
``MILLRACE_RELIABILITY_DATABASE`` (e.g. ``{"OPTIONS": {...}}`` for a fault scenario).
An ``application_name`` given there gets the process id appended, so that a fault
scenario can tell one worker's sessions from another's.
"""

from __future__ import annotations

import json
import os

from testproject.settings import *  # noqa: F403
from testproject.settings import MILLRACE as _SAMPLE_MILLRACE
from testproject.settings import _server_database

_DATABASE = json.loads(os.environ.get("MILLRACE_RELIABILITY_DATABASE", "{}"))
if "application_name" in _DATABASE.get("OPTIONS", {}):
    _DATABASE["OPTIONS"]["application_name"] += f" {os.getpid()}"
DATABASES = {
    "default": {
        **_server_database(os.environ["MILLRACE_RELIABILITY_DATABASE_URL"]),
        **_DATABASE,
    }
}
MILLRACE = {**_SAMPLE_MILLRACE, **json.loads(os.environ.get("MILLRACE_RELIABILITY_SETTINGS", "{}"))}
