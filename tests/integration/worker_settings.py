"""Settings of the worker processes the integration tests start.

The sample project's settings, with the default database pointed at the test run's
database (``MILLRACE_INTEGRATION_DATABASE_URL``) and ``MILLRACE`` overridden by the JSON
in ``MILLRACE_INTEGRATION_SETTINGS`` (short leases, fast polling).
"""

from __future__ import annotations

import json
import os

from testproject.settings import *  # noqa: F403
from testproject.settings import MILLRACE as _SAMPLE_MILLRACE
from testproject.settings import _server_database

DATABASES = {"default": _server_database(os.environ["MILLRACE_INTEGRATION_DATABASE_URL"])}
MILLRACE = {
    **_SAMPLE_MILLRACE,
    **json.loads(os.environ.get("MILLRACE_INTEGRATION_SETTINGS", "{}")),
}
