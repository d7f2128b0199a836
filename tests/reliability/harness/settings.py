"""Django settings of the processes the reliability harness starts.

The sample project's settings with the default database pointed at
``MILLRACE_RELIABILITY_DATABASE_URL``; ``MILLRACE`` updated from the JSON object in
``MILLRACE_RELIABILITY_SETTINGS`` and the database entry from the JSON object in
``MILLRACE_RELIABILITY_DATABASE`` (e.g. ``{"OPTIONS": {...}}`` for a fault scenario).
"""

from __future__ import annotations

import json
import os

from testproject.settings import *  # noqa: F403
from testproject.settings import MILLRACE as _SAMPLE_MILLRACE
from testproject.settings import _server_database

DATABASES = {
    "default": {
        **_server_database(os.environ["MILLRACE_RELIABILITY_DATABASE_URL"]),
        **json.loads(os.environ.get("MILLRACE_RELIABILITY_DATABASE", "{}")),
    }
}
MILLRACE = {**_SAMPLE_MILLRACE, **json.loads(os.environ.get("MILLRACE_RELIABILITY_SETTINGS", "{}"))}
