"""Settings of the worker processes the PostgreSQL tests start: the sample project's,
with the default database pointed at the test run's database
(``MILLRACE_TASKS_DATABASE_URL``), fast polling, and ``TASKS`` naming MillraceBackend."""

from __future__ import annotations

import os

from testproject.settings import *  # noqa: F403
from testproject.settings import _server_database
from tests.tasks.settings_values import FAST_MILLRACE
from tests.tasks.settings_values import TASKS as TASKS

DATABASES = {"default": _server_database(os.environ["MILLRACE_TASKS_DATABASE_URL"])}
MILLRACE = FAST_MILLRACE
