"""The demo's jobs: enqueue one of each shape, and tell how far they got."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from millrace_django import jobs
from millrace_django.conf import get_settings
from millrace_django.contract import JobState
from millrace_django.engine import JobDefinition
from millrace_django.models import JOB_STATES, Bookmark, Job, Recurring, WorkflowInstance
from testproject import tasks as django_tasks
from testproject import workflows as order_workflows
from testproject.sample import jobs as sample
from testproject.sample.models import Account

RECURRING_ID = "demo-tick"
REMINDER_DELAY = timedelta(seconds=3)
CANCEL_AFTER = timedelta(seconds=5)
REPORT_SECONDS = 120.0


def forget_everything() -> None:
    """Delete every job (with its history), recurring definition and workflow instance
    (with its waits): a fresh demo."""
    database = get_settings().database
    Job.objects.using(database).all().delete()
    Recurring.objects.using(database).all().delete()
    WorkflowInstance.objects.using(database).all().delete()
    Bookmark.objects.using(database).all().delete()


def enqueue_samples() -> dict[str, object]:
    """One job of every shape; returns what was created, by shape."""
    created: dict[str, object] = {}
    created["fire-and-forget"] = sample.say_hello.enqueue("world")
    created["delayed"] = sample.send_reminder.schedule(42, delay=REMINDER_DELAY)
    # overlap="skip": a tick still running when the next minute comes drops that one.
    jobs.upsert_recurring(RECURRING_ID, sample.tick, cron="* * * * *", overlap="skip")
    jobs.trigger_recurring(RECURRING_ID)  # one occurrence now; the next at the minute
    created["recurring"] = f"{RECURRING_ID} (every minute, one fired now)"
    invoice = sample.build_invoice.enqueue("1001")
    created["continuation"] = (invoice, jobs.continue_with(invoice, sample.email_invoice, "1001"))
    with jobs.batch() as batch:
        for width in (320, 640, 1280):
            batch.enqueue(sample.resize_image, "cat.png", width)
    created["batch"] = tuple(batch.ids)
    created["retry then success"] = sample.flaky_sync.enqueue("acme")
    created["failure to dead"] = sample.import_broken_file.enqueue("uploads/orders.xlsx")
    created["limited"] = tuple(
        sample.sync_customer.enqueue(customer) for customer in ("acme", "acme", "globex")
    )
    report = sample.long_report.enqueue(REPORT_SECONDS)
    created["cancellable long job"] = report
    sample.cancel_job.schedule(str(report), delay=CANCEL_AFTER)
    created["async"] = sample.fetch_rates.enqueue("EUR")
    for name in ("alice", "bob"):
        Account.objects.update_or_create(name=name, defaults={"balance": 10_000})
    created["atomic"] = sample.transfer.enqueue("alice", "bob", 2_500)
    orders = order_workflows.start_demo()  # see testproject/workflows.py
    created["workflow"] = ", ".join(f"{order} {instance}" for order, instance in orders.items())
    for shape, result in django_tasks.enqueue_samples().items():  # see testproject/tasks.py
        created[f"django {shape}"] = result.id
    return created


@dataclass(frozen=True, slots=True)
class Expectation:
    job: JobDefinition[..., Any]
    state: JobState
    attempts: int | None = None


EXPECTED = (
    Expectation(sample.say_hello, JobState.SUCCEEDED),
    Expectation(sample.send_reminder, JobState.SUCCEEDED),
    Expectation(sample.tick, JobState.SUCCEEDED),
    Expectation(sample.build_invoice, JobState.SUCCEEDED),
    Expectation(sample.email_invoice, JobState.SUCCEEDED),
    Expectation(sample.resize_image, JobState.SUCCEEDED),
    Expectation(sample.flaky_sync, JobState.SUCCEEDED, attempts=2),
    Expectation(sample.import_broken_file, JobState.DEAD, attempts=2),
    Expectation(sample.sync_customer, JobState.SUCCEEDED),
    Expectation(sample.long_report, JobState.CANCELLED),
    Expectation(sample.cancel_job, JobState.SUCCEEDED),
    Expectation(sample.fetch_rates, JobState.SUCCEEDED),
    Expectation(sample.transfer, JobState.SUCCEEDED),
    Expectation(order_workflows.auto_approve, JobState.SUCCEEDED),
)

PENDING = frozenset(
    {JobState.SCHEDULED, JobState.ENQUEUED, JobState.PROCESSING, JobState.FAILED, JobState.AWAITING}
)


@dataclass(frozen=True, slots=True)
class Row:
    target: str
    state: JobState
    attempt: int


def job_rows() -> list[Row]:
    """Every stored job, oldest first."""
    queryset = Job.objects.using(get_settings().database).order_by("seq")
    return [
        Row(target, JOB_STATES[state], attempt)
        for target, state, attempt in queryset.values_list("target", "state", "attempt")
    ]


def summary(rows: list[Row]) -> list[str]:
    """Lines of "target: count state (attempts)" for each job function."""
    by_target: dict[str, list[Row]] = defaultdict(list)
    for row in rows:
        by_target[row.target].append(row)
    lines = []
    for target, found in by_target.items():
        states = ", ".join(
            f"{row.state.value}" + (f" after {row.attempt} attempts" if row.attempt > 1 else "")
            for row in found
        )
        lines.append(f"  {target.rpartition(':')[2]:<20} {states}")
    return lines


def check(rows: list[Row]) -> tuple[bool, list[str]]:
    """Whether every sample settled, and what is still pending or went wrong."""
    problems: list[str] = []
    pending = False
    for expectation in EXPECTED:
        target = expectation.job.target
        found = [row for row in rows if row.target == target]
        name = target.rpartition(":")[2]
        if not found:
            problems.append(f"{name}: no job")
            continue
        for row in found:
            if row.state in PENDING:
                pending = True
                problems.append(f"{name}: still {row.state.value}")
            elif row.state is not expectation.state:
                problems.append(f"{name}: {row.state.value}, expected {expectation.state.value}")
            elif expectation.attempts is not None and row.attempt != expectation.attempts:
                problems.append(f"{name}: {row.attempt} attempts, expected {expectation.attempts}")
    return pending, problems
