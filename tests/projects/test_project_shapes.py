"""Projects shaped unlike the sample one run ``manage.py`` commands, jobs and workers:
one without ``django.contrib.admin`` (documented as optional), one without URLs (a
settings module for worker machines). Only a project that mounts the dashboard needs
the admin, and the system checks say so. Each runs ``manage.py`` in a subprocess on a
SQLite file of its own."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


class Project:
    def __init__(self, settings: str, database: Path) -> None:
        self.environment = {
            **{k: v for k, v in os.environ.items() if not k.startswith("MILLRACE_")},
            "DJANGO_SETTINGS_MODULE": settings,
            "MILLRACE_SQLITE_PATH": str(database),
        }

    def manage(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "manage.py", *args],
            cwd=REPO,
            env=self.environment,
            capture_output=True,
            text=True,
            timeout=120,
        )

    def succeeds(self, *args: str) -> str:
        done = self.manage(*args)
        assert done.returncode == 0, f"manage.py {' '.join(args)}:\n{done.stderr}"
        return done.stdout

    def shell(self, code: str) -> str:
        """What ``code`` prints, run by ``manage.py shell``."""
        return self.succeeds("shell", "--no-imports", "--command", code).strip()


@pytest.mark.parametrize(
    "settings", ["tests.projects.without_admin", "tests.projects.without_urls"]
)
def test_a_project_without_the_admin_or_without_urls_runs_jobs_and_workers(
    settings: str, tmp_path: Path
) -> None:
    project = Project(settings, tmp_path / "db.sqlite3")
    project.succeeds("migrate", "--verbosity", "0")
    project.succeeds("check", "--fail-level", "WARNING")
    job_id = project.shell(
        "from testproject.sample.jobs import say_hello; print(say_hello.enqueue('you'))"
    )
    project.succeeds("millrace_worker", "--until-idle", "--no-scheduler")
    state = project.shell(f"from millrace_django import jobs; print(jobs.get({job_id!r}).state)")
    assert state == "succeeded"


def test_mounting_the_dashboard_without_the_admin_fails_the_checks(tmp_path: Path) -> None:
    project = Project("tests.projects.dashboard_without_admin", tmp_path / "db.sqlite3")
    done = project.manage("check")
    assert done.returncode != 0
    assert "millrace.E205" in done.stderr
    assert "django.contrib.admin" in done.stderr
