"""``manage.py millrace_health``: exit 0 when healthy, 1 with a one-line reason."""

from __future__ import annotations

import io
import json
import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from millrace_django import assembly
from millrace_django.clock import FakeClock
from millrace_django.conf import get_settings
from millrace_django.contract import WorkerHeartbeat
from millrace_django.engine import JobClient
from tests.unit.observability import jobs

REPO = Path(__file__).resolve().parents[2]
transactional = pytest.mark.django_db(transaction=True)


def health(*args: str) -> str:
    out = io.StringIO()
    call_command("millrace_health", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def beat(worker_id: str, *, ago: timedelta, hostname: str = "elsewhere") -> None:
    seen = assembly.clock().now() - ago
    assembly.storage().record_worker_heartbeat(  # type: ignore[attr-defined]
        WorkerHeartbeat(
            worker_id=worker_id,
            hostname=hostname,
            pid=1,
            queues=frozenset({"default"}),
            concurrency=1,
            in_flight=0,
            started_at=seen,
            seen_at=seen,
        )
    )


@transactional
def test_a_reachable_migrated_database_is_healthy() -> None:
    line = health()
    assert line.startswith("healthy: database 'default' answered in ")
    assert "migrations applied" in line


@transactional
def test_json_lists_every_check() -> None:
    beat("w-fresh", ago=timedelta(0), hostname=socket.gethostname())
    report = json.loads(health("--json", "--worker", "--max-queue-latency", "60"))
    assert report["healthy"] is True and report["reason"] is None
    assert [(c["name"], c["ok"]) for c in report["checks"]] == [
        ("database", True),
        ("clock", True),
        ("migrations", True),
        ("worker", True),
        ("queue_latency", True),
    ]
    assert report["checks"][1]["detail"] == "the database runs on this machine's clock"
    assert "w-fresh" in report["checks"][3]["detail"]


@transactional
def test_a_stale_worker_heartbeat_is_unhealthy() -> None:
    beat("w-stale", ago=timedelta(hours=1))
    with pytest.raises(
        CommandError, match=r"^unhealthy: worker w-stale: last heartbeat 3600 s ago \(limit 3 s\)$"
    ) as raised:
        health("--worker", "w-stale")
    assert raised.value.returncode == 1
    assert health("--worker", "w-stale", "--max-heartbeat-age", "7200").startswith("healthy")


@transactional
def test_no_worker_on_this_host_is_unhealthy_and_a_fresh_one_is_healthy() -> None:
    beat("w-elsewhere", ago=timedelta(0))
    with pytest.raises(CommandError, match="no registered worker for this host"):
        health("--worker")
    beat("w-here", ago=timedelta(0), hostname=socket.gethostname())
    assert "w-here" in health("--worker")


@transactional
def test_an_old_backlog_is_unhealthy_past_the_latency_limit() -> None:
    clock = FakeClock(assembly.clock().now() - timedelta(minutes=10))
    JobClient(assembly.storage(), clock, get_settings()).enqueue(
        jobs.chatty.using(queue="emails"), "x"
    )
    assert health("--max-queue-latency", "3600").startswith("healthy")
    with pytest.raises(
        CommandError, match=r"queue 'emails': oldest enqueued job created 600 s ago \(limit 60 s\)"
    ):
        health("--max-queue-latency", "60")


# -- as an orchestrator runs it: a process and its exit status ---------------------------


def run_probe(tmp_path: Path, *args: str, **environment: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "testproject.settings",
        "MILLRACE_SQLITE_PATH": str(tmp_path / "probe.sqlite3"),
        **environment,
    }
    return subprocess.run(
        [sys.executable, "manage.py", "millrace_health", *args],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
def closed_port() -> int:
    """A loopback port nothing listens on."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def silent_server() -> Iterator[int]:
    """A loopback port that accepts connections and never says a word (a hung server)."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        yield int(server.getsockname()[1])


def test_an_unreachable_database_exits_1_with_one_line(tmp_path: Path, closed_port: int) -> None:
    url = f"postgres://millrace:secret@127.0.0.1:{closed_port}/nowhere"
    probe = run_probe(tmp_path, MILLRACE_DATABASE_URL=url)
    assert probe.returncode == 1
    assert probe.stdout == ""
    (line,) = probe.stderr.strip().splitlines()
    assert line.startswith("CommandError: unhealthy: database 'default' is unreachable: ")


def test_a_database_that_never_answers_exits_1_within_the_timeout(
    tmp_path: Path, silent_server: int
) -> None:
    url = f"postgres://millrace:secret@127.0.0.1:{silent_server}/hung"
    probe = run_probe(tmp_path, "--timeout", "1", MILLRACE_DATABASE_URL=url)
    assert probe.returncode == 1
    assert probe.stderr.strip() == (
        "CommandError: unhealthy: the checks did not finish within 1 s (is the database answering?)"
    )


def test_an_unmigrated_database_exits_1_and_says_so_in_json(tmp_path: Path) -> None:
    probe = run_probe(tmp_path, "--json")
    assert probe.returncode == 1
    report = json.loads(probe.stdout)
    assert report["healthy"] is False
    assert [(c["name"], c["ok"]) for c in report["checks"]] == [
        ("database", True),
        ("clock", True),
        ("migrations", False),
    ]
    assert "migration(s) not applied, first millrace_django.0001_initial" in report["reason"]


@pytest.mark.postgres
def test_on_postgresql_the_probe_reports_this_hosts_offset_to_the_database_clock(
    tmp_path: Path,
) -> None:
    url = os.environ.get("MILLRACE_TEST_POSTGRES_URL")
    if not url:
        if os.environ.get("CI"):
            pytest.fail("MILLRACE_TEST_POSTGRES_URL is not set (CI must run against it)")
        pytest.skip("MILLRACE_TEST_POSTGRES_URL is not set (scripts/testdb.sh starts one)")
    probe = run_probe(tmp_path, "--json", MILLRACE_DATABASE_URL=url)
    report = json.loads(probe.stdout)
    (clock,) = [check for check in report["checks"] if check["name"] == "clock"]
    # The server runs on this machine: the offset is well under a second either way.
    assert re.fullmatch(
        r"this host's clock is 0\.\d{3} s (behind|ahead of) the database's "
        r"\(within 0\.\d{3} s\)",
        clock["detail"],
    ), clock["detail"]
