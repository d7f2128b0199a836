"""The cursor codec, the fake clock and the time-ordered ids."""

import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta, timezone
from uuid import UUID, uuid4

import pytest

from millrace_django import ids
from millrace_django.clock import FakeClock, SystemClock
from millrace_django.contract import (
    decode_time_id,
    decode_time_text,
    encode_time_id,
    encode_time_text,
)
from millrace_django.errors import (
    ConcurrencyConflict,
    DuplicateJobId,
    InvalidCursor,
    MillraceError,
    ParentJobNotFound,
    StorageError,
)
from millrace_django.ids import new_id

INSTANT = datetime(2026, 3, 4, 5, 6, 7, 891011, tzinfo=UTC)
RANDOM_BITS = (1 << 62) - 1
"""The random tail of a UUIDv7 (below its variant bits)."""


def test_a_job_cursor_round_trips_its_time_and_id() -> None:
    row_id = uuid4()
    assert decode_time_id(encode_time_id(INSTANT, row_id)) == (INSTANT, row_id)


def test_a_recurring_cursor_round_trips_its_time_and_unicode_id() -> None:
    assert decode_time_text(encode_time_text(INSTANT, "nächtlich")) == (INSTANT, "nächtlich")


@pytest.mark.parametrize("bad", ["not-a-cursor", "!!not-a-cursor!!", "%%%", " ", "a", ""])
def test_garbage_cursors_are_rejected(bad: str) -> None:
    with pytest.raises(InvalidCursor):
        decode_time_id(bad)
    with pytest.raises(InvalidCursor):
        decode_time_text(bad)


def test_a_cursor_of_one_kind_is_rejected_by_the_other() -> None:
    with pytest.raises(InvalidCursor):
        decode_time_text(encode_time_id(INSTANT, uuid4()))
    with pytest.raises(InvalidCursor):
        decode_time_id(encode_time_text(INSTANT, "nightly"))


def test_a_tampered_cursor_is_rejected() -> None:
    cursor = encode_time_id(INSTANT, uuid4())
    tampered = cursor[:-2] + ("A" if cursor[-2] != "A" else "B") + cursor[-1]
    with pytest.raises(InvalidCursor):
        decode_time_id(tampered)


def test_the_fake_clock_starts_at_the_kit_epoch_and_moves_only_forward() -> None:
    clock = FakeClock()
    assert clock.now() == datetime(2026, 1, 1, tzinfo=UTC)
    assert clock.advance(timedelta(minutes=5)) == datetime(2026, 1, 1, 0, 5, tzinfo=UTC)
    with pytest.raises(ValueError, match="forward"):
        clock.advance(timedelta(seconds=-1))
    with pytest.raises(ValueError, match="forward"):
        clock.set(datetime(2025, 1, 1, tzinfo=UTC))


def test_the_fake_clock_refuses_naive_instants_and_normalizes_to_utc() -> None:
    with pytest.raises(ValueError, match="aware"):
        FakeClock(datetime(2026, 1, 1))
    paris = timezone(timedelta(hours=1))
    assert FakeClock(datetime(2026, 1, 1, 1, tzinfo=paris)).now().tzinfo == UTC


def test_the_system_clock_is_aware_utc() -> None:
    assert SystemClock().now().tzinfo == UTC


def test_ids_are_version_7_and_carry_the_clock_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ids, "_last_ms", -1)  # ids minted earlier in this process at a later time
    clock = FakeClock(INSTANT)
    job_id = new_id(clock)
    assert job_id.version == 7
    assert job_id.int >> 80 == int(INSTANT.timestamp() * 1000)


def test_ids_minted_at_the_same_instant_are_strictly_increasing() -> None:
    clock = FakeClock()
    ids = [new_id(clock) for _ in range(5000)]
    assert ids == sorted(ids)
    assert len(set(ids)) == len(ids)


def test_ids_carry_fresh_random_bits() -> None:
    clock = FakeClock()
    tails = {new_id(clock).int & RANDOM_BITS for _ in range(2000)}  # several OS reads
    assert len(tails) == 2000


FORKED_IDS = """
import os
from millrace_django.clock import FakeClock
from millrace_django.ids import new_id

clock = FakeClock()
new_id(clock)  # the parent now holds random bits it has not used yet
read, write = os.pipe()
pid = os.fork()
if pid == 0:
    os.write(write, new_id(clock).bytes)
    os._exit(0)
os.close(write)
child = os.read(read, 16)
os.waitpid(pid, 0)
print(int.from_bytes(child), new_id(clock).int)
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_never_reuses_its_parents_random_bits() -> None:
    # In a fresh interpreter: forking this multi-threaded one could deadlock the child.
    done = subprocess.run(
        [sys.executable, "-c", FORKED_IDS], capture_output=True, text=True, timeout=60, check=True
    )
    child, parent = (int(value) for value in done.stdout.split())
    assert child >> 80 == parent >> 80  # same millisecond: only the random bits tell them apart
    assert child & RANDOM_BITS != parent & RANDOM_BITS


def test_ids_follow_the_clock_across_time() -> None:
    clock = FakeClock()
    first = new_id(clock)
    clock.advance(timedelta(seconds=1))
    assert new_id(clock) > first
    assert isinstance(first, UUID)


def test_storage_errors_share_one_base() -> None:
    for error in (
        ConcurrencyConflict("stale"),
        DuplicateJobId(uuid4()),
        ParentJobNotFound(uuid4()),
        InvalidCursor("x"),
    ):
        assert isinstance(error, StorageError)
        assert isinstance(error, MillraceError)


def test_errors_name_the_offending_id() -> None:
    parent = uuid4()
    assert str(parent) in str(ParentJobNotFound(parent))
    assert ParentJobNotFound(parent).parent_id == parent


def test_an_id_from_a_clock_behind_the_last_one_still_carries_its_own_time() -> None:
    new_id(FakeClock(datetime(2030, 1, 1, tzinfo=UTC)))
    earlier = FakeClock(INSTANT)
    assert new_id(earlier).int >> 80 == int(INSTANT.timestamp() * 1000)
