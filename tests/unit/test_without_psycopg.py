"""psycopg is an optional extra (``millrace-django[postgres]``): a project on SQLite,
MariaDB or SQL Server installs without it, so nothing may need it until a PostgreSQL
connection is used."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

WITHOUT_PSYCOPG = """
import sys
sys.modules["psycopg"] = None  # every import of it fails, as when it is not installed
import django
django.setup()
from django.core.management import call_command
from millrace_django.storage.orm import DjangoStorage  # its PostgreSQL rooms included
call_command("check")
print(DjangoStorage.__name__)
"""


def test_the_orm_provider_and_the_system_checks_need_no_psycopg() -> None:
    environment = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("MILLRACE_TEST_", "MILLRACE_DATABASE_URL"))
    }
    environment["DJANGO_SETTINGS_MODULE"] = "testproject.settings"
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_PSYCOPG],
        cwd=Path(__file__).resolve().parents[2],
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().endswith("DjangoStorage")
