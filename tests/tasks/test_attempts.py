"""The task runner's record of attempts, as the job's checkpoint keeps it."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from millrace_django.tasks_backend.attempts import KEPT_ATTEMPTS, TaskAttempt, TaskAttempts

START = datetime(2026, 11, 5, 9, 30, 0, 123456, tzinfo=UTC)


def test_the_record_round_trips_through_json() -> None:
    record = (
        TaskAttempts()
        .started(TaskAttempt(1, "host:1:a", START))
        .raised(1, "builtins.ValueError")
        .started(TaskAttempt(2, "host:2:b", START + timedelta(seconds=5)))
    )
    assert TaskAttempts.from_checkpoint(record.to_checkpoint()) == record
    assert record.to_checkpoint() == {
        "attempts": [
            {
                "attempt": 1,
                "worker_id": "host:1:a",
                "started_at": "2026-11-05T09:30:00.123456+00:00",
                "raised": "builtins.ValueError",
            },
            {
                "attempt": 2,
                "worker_id": "host:2:b",
                "started_at": "2026-11-05T09:30:05.123456+00:00",
            },
        ]
    }
    assert record.raised_by_number == {1: "builtins.ValueError"}


def test_anything_but_a_record_reads_as_no_attempts() -> None:
    for checkpoint in (None, 3, "x", [], {}, {"attempts": "no"}):
        assert TaskAttempts.from_checkpoint(checkpoint) == TaskAttempts()
    good = TaskAttempt(2, "w", START).to_json()
    malformed = [
        {"attempt": "1", "worker_id": "w", "started_at": START.isoformat()},
        {"attempt": 1, "worker_id": "w", "started_at": "yesterday"},
        {"attempt": 1, "worker_id": "w", "started_at": START.isoformat(), "raised": 7},
        "attempt 1",
    ]
    read = TaskAttempts.from_checkpoint({"attempts": [*malformed, good]})
    assert read.attempts == (TaskAttempt(2, "w", START),)


def test_the_record_keeps_the_newest_attempts() -> None:
    record = TaskAttempts()
    for number in range(1, KEPT_ATTEMPTS + 6):
        record = record.started(TaskAttempt(number, "w", START))
    assert len(record.attempts) == KEPT_ATTEMPTS
    assert record.attempts[0].number == 6
    assert record.attempts[-1].number == KEPT_ATTEMPTS + 5
