"""Workflows on PostgreSQL with real ``manage.py millrace_worker`` processes.

The test process starts instances and sends signals through its own
:class:`~millrace_django.engine.workflow.WorkflowClient`; the workers import the
definitions from ``tests.integration.workflow_flows`` on demand (the module is recorded
in each instance). Activities append to an execution ledger outside the database.

Configured by MILLRACE_TEST_POSTGRES_URL (``scripts/testdb.sh`` starts a throwaway server);
skipped when unset, except in CI, where it fails.
"""

from __future__ import annotations

import signal
import threading
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from uuid import UUID

import pytest
from django.db import connections

from millrace_django.clock import SystemClock
from millrace_django.contract import InstanceState, JobState
from millrace_django.engine import EngineSettings, Retry
from millrace_django.engine.workflow import WorkflowClient, targets
from millrace_django.models import JOB_STATES, Job
from millrace_django.storage.orm import DjangoStorage
from tests.conformance.django_harness import server_marks
from tests.integration import workflow_flows as flows
from tests.integration.processes import Ledger, Processes, wait_until
from tests.integration.test_worker_processes import STARTED, _database_url

ALIAS = "postgres"
pytestmark = server_marks(ALIAS, "MILLRACE_TEST_POSTGRES_URL")


@pytest.fixture
def workflows() -> WorkflowClient:
    clock = SystemClock()
    config = EngineSettings(queues=frozenset({"default"}), default_retry=Retry.none())
    return WorkflowClient(DjangoStorage(ALIAS, clock), clock, config)


@pytest.fixture
def ledger(tmp_path: Path) -> Ledger:
    return Ledger(tmp_path / "ledger.txt")


@pytest.fixture
def processes(ledger: Ledger, tmp_path: Path) -> Iterator[Processes]:
    started = Processes(_database_url(), ledger, tmp_path)
    yield started
    started.close()
    connections[ALIAS].close()


def calls(ledger: Ledger, name: str | None = None, instance: UUID | None = None) -> list[str]:
    """``name node loop`` for each ledger line (of one instance), in order."""
    found = []
    for line in ledger.path.read_text().splitlines():
        event, instance_id, node, loop, _pid, _at = line.split()
        if (name is None or event == name) and (instance is None or instance_id == str(instance)):
            found.append(f"{event} {node} {loop}")
    return found


def state_of(workflows: WorkflowClient, instance_id: UUID) -> InstanceState | None:
    instance = workflows.get(instance_id)
    return instance.state if instance is not None else None


def reaches(
    workflows: WorkflowClient, instance_id: UUID, state: InstanceState, timeout: float = 30
) -> None:
    wait_until(
        lambda: state_of(workflows, instance_id) is state,
        timeout,
        f"instance {instance_id} to be {state.value} (it is {state_of(workflows, instance_id)})",
    )


def jobs_of(instance_id: UUID) -> list[Job]:
    return list(Job.objects.using(ALIAS).filter(workflow_instance_id=instance_id).order_by("seq"))


def worker(processes: Processes, *args: str) -> object:
    started = processes.start("millrace_worker", *args)
    started.wait_for_log(STARTED)
    return started


def test_a_linear_workflow_runs_to_completion_in_a_worker_process(
    workflows: WorkflowClient, processes: Processes, ledger: Ledger
) -> None:
    worker(processes, "--concurrency=2")
    instance_id = workflows.start(flows.LINEAR, {"n": 1})
    reaches(workflows, instance_id, InstanceState.COMPLETED)
    assert calls(ledger) == ["one a1 -", "two a2 -", "three a3 -"]
    assert workflows.data(instance_id)["trail"] == ["one", "two", "three"]
    assert {JOB_STATES[j.state] for j in jobs_of(instance_id)} == {JobState.SUCCEEDED}


def test_an_order_waits_for_its_signal_then_runs_its_parallel_branches(
    workflows: WorkflowClient, processes: Processes, ledger: Ledger
) -> None:
    worker(processes, "--concurrency=4")
    instance_id = workflows.start(flows.ORDER, {"order_id": "o-1"})
    reaches(workflows, instance_id, InstanceState.SUSPENDED)
    assert workflows.signal("approval", "o-1", {"approved": True})
    reaches(workflows, instance_id, InstanceState.COMPLETED)
    data = workflows.data(instance_id)
    assert data["approval"] == {"approved": True}
    assert (data["notified"], data["charged"], data["shipped"]) == (True, True, True)
    assert "expired" not in data
    assert sorted(calls(ledger))[:3] == ["charge a4 -", "notify a3 -", "reserve a1 -"]
    assert calls(ledger)[-1] == "ship a5 -"
    assert workflows.signal("approval", "o-1", {"approved": True}) is False


def test_a_wait_times_out_through_the_scheduler_and_takes_its_timeout_path(
    workflows: WorkflowClient, processes: Processes, ledger: Ledger
) -> None:
    worker(processes, "--concurrency=2")
    instance_id = workflows.start(flows.ORDER, {"order_id": "o-2"})
    reaches(workflows, instance_id, InstanceState.COMPLETED, timeout=40)
    assert workflows.data(instance_id)["expired"] is True
    assert "approval" not in workflows.data(instance_id)
    assert workflows.signal("approval", "o-2", {"approved": True}) is False


def test_a_failed_saga_is_compensated_newest_first(
    workflows: WorkflowClient, processes: Processes, ledger: Ledger
) -> None:
    worker(processes, "--concurrency=2")
    instance_id = workflows.start(flows.SAGA, {"fail": {"ship": True}})
    reaches(workflows, instance_id, InstanceState.COMPENSATED)
    assert calls(ledger) == [
        "reserve a1 -",
        "charge a2 -",
        "ship a3 -",
        "refund a2 -",
        "release a1 -",
    ]
    instance = workflows.get(instance_id)
    assert instance is not None and instance.failed_node == "a3"


def test_a_failed_compensation_suspends_and_an_operator_retry_finishes_it(
    workflows: WorkflowClient, processes: Processes, ledger: Ledger
) -> None:
    broken = Path(f"{ledger.path}.broken-refund")
    broken.touch()
    worker(processes, "--concurrency=2")
    instance_id = workflows.start(flows.SAGA, {"fail": {"ship": True}})
    reaches(workflows, instance_id, InstanceState.SUSPENDED)
    instance = workflows.get(instance_id)
    assert instance is not None
    assert [(s.kind, s.node) for s in instance.stuck] == [("compensation", "a2")]
    broken.unlink()
    assert workflows.recover(instance_id, "retry")
    reaches(workflows, instance_id, InstanceState.COMPENSATED)
    assert calls(ledger)[-3:] == ["refund a2 -", "refund a2 -", "release a1 -"]


def test_cancelling_an_instance_cancels_its_timer_and_nothing_more_runs(
    workflows: WorkflowClient, processes: Processes, ledger: Ledger
) -> None:
    worker(processes, "--concurrency=2")
    instance_id = workflows.start(flows.DELAYED)
    wait_until(lambda: calls(ledger) == ["one a1 -"], 30, "the first step")
    wait_until(
        lambda: any(JOB_STATES[j.state] is JobState.SCHEDULED for j in jobs_of(instance_id)),
        30,
        "the timer",
    )
    assert workflows.cancel(instance_id)
    assert state_of(workflows, instance_id) is InstanceState.CANCELLED
    states = [JOB_STATES[j.state] for j in jobs_of(instance_id)]
    assert states == [JobState.SUCCEEDED, JobState.CANCELLED]
    assert workflows.cancel(instance_id) is False


def test_a_fan_out_of_twenty_branches_completes_under_worker_restarts(
    workflows: WorkflowClient, processes: Processes, ledger: Ledger
) -> None:
    first = worker(processes, "--concurrency=4")
    second = worker(processes, "--concurrency=4")
    instance_id = workflows.start(flows.FANOUT, {"items": list(range(20)), "pause": 0.4})
    wait_until(lambda: len(calls(ledger, "branch")) >= 4, 30, "branches running")
    first.send(signal.SIGKILL)  # type: ignore[attr-defined]
    third = worker(processes, "--concurrency=4")
    wait_until(lambda: len(calls(ledger, "branch")) >= 12, 30, "more branches")
    second.send(signal.SIGTERM)  # type: ignore[attr-defined]
    worker(processes, "--concurrency=4")
    reaches(workflows, instance_id, InstanceState.COMPLETED, timeout=60)
    data = workflows.data(instance_id)
    assert data["results"] == {str(n): n for n in range(20)}
    assert data["gathered"] == 20
    branches = Counter(line.split()[2] for line in calls(ledger, "branch"))
    assert set(branches) == {str(n) for n in range(20)}  # every item ran (some twice:
    # a killed worker's attempt runs again, which at-least-once allows)
    assert calls(ledger, "gather") == ["gather a2 -"]
    _ = third


def test_fan_outs_acknowledged_together_lose_no_branch(
    workflows: WorkflowClient, processes: Processes, ledger: Ledger
) -> None:
    """Branches of one instance finishing together are acknowledged in one batch, each
    planned onto the state the one before leaves: every branch's result is kept, and
    each instance gathers once."""
    ids = workflows.start_many(flows.FANOUT, [{"items": list(range(10))} for _ in range(30)])
    worker(processes, "--concurrency=8")
    for instance_id in ids:
        reaches(workflows, instance_id, InstanceState.COMPLETED, timeout=60)
        data = workflows.data(instance_id)
        assert data["results"] == {str(n): n for n in range(10)}
        assert data["gathered"] == 10
    assert len(calls(ledger, "gather")) == 30


def test_a_hundred_concurrent_signals_at_ten_waiting_instances_resume_each_exactly_once(
    workflows: WorkflowClient, processes: Processes, ledger: Ledger
) -> None:
    worker(processes, "--concurrency=4")
    ids = [workflows.start(flows.WAIT_ONLY, {"key": f"k-{n}"}) for n in range(10)]
    for instance_id in ids:
        reaches(workflows, instance_id, InstanceState.SUSPENDED)
    barrier = threading.Barrier(100)
    results: list[tuple[int, bool]] = []
    lock = threading.Lock()

    def send(n: int) -> None:
        try:
            barrier.wait(30)
            delivered = workflows.signal("ping", f"k-{n % 10}", n)
            with lock:
                results.append((n % 10, delivered))
        finally:
            connections[ALIAS].close()

    threads = [threading.Thread(target=send, args=(n,)) for n in range(100)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(results) == 100
    assert sorted(key for key, delivered in results if delivered) == list(range(10))
    for instance_id in ids:
        reaches(workflows, instance_id, InstanceState.COMPLETED)
        resumes = [j for j in jobs_of(instance_id) if j.target == targets.RESUME]
        assert len(resumes) == 1
    assert len(calls(ledger, "ship")) == 10
