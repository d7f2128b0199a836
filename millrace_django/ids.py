"""Time-ordered (UUIDv7, RFC 9562) ids minted from the injected clock.

Ids sort by creation time, so indexes on them stay append-mostly. Within one millisecond
a 12-bit counter keeps ids from one process strictly increasing. An id always carries its
clock's time: a clock behind the last one minted (another clock, in tests) starts afresh.

The random bits come from the operating system's CSPRNG (``os.urandom``), read a few
kilobytes at a time rather than once per id; a forked child never reuses its parent's.
"""

from __future__ import annotations

import os
import struct
import threading
from collections.abc import Iterator
from datetime import datetime
from uuid import UUID, SafeUUID

from millrace_django.clock import Clock

_lock = threading.Lock()
_last_ms = -1
_counter = 0

_DRAWS_PER_READ = 512
"""64-bit random draws read from the OS at once (4 KiB)."""
_unpack_draws = struct.Struct(f"<{_DRAWS_PER_READ}Q").unpack
_draws: Iterator[int] = iter(())
"""The draws not drawn yet, drawn as ``next(_draws, None) or _fresh_draw()`` (a zero draw,
one in 2**64, is skipped with the rest of its read)."""


def _fresh_draw() -> int:
    """64 random bits, from a new read once the previous one is all drawn (call with
    ``_lock`` held)."""
    global _draws
    _draws = iter(_unpack_draws(os.urandom(8 * _DRAWS_PER_READ)))
    return next(_draws)


def _forget_draws() -> None:
    """In a forked child: the parent's unused draws would be drawn twice."""
    global _draws
    _draws = iter(())


os.register_at_fork(after_in_child=_forget_draws)


def new_id(clock: Clock) -> UUID:
    """Mint a UUIDv7 whose timestamp is ``clock.now()``."""
    return id_at(clock.now())


def id_at(now: datetime) -> UUID:
    """Mint a UUIDv7 whose timestamp is ``now`` (from the injected clock), for callers
    that stamp the same instant elsewhere (a job's ``created_at``)."""
    global _last_ms, _counter
    ms = int(now.timestamp() * 1000)
    with _lock:
        if _last_ms - 1 <= ms <= _last_ms:  # this millisecond, or one borrowed after it
            ms = _last_ms
            _counter += 1
            if _counter > 0xFFF:  # 4096 ids in one millisecond: borrow the next one
                ms += 1
                _counter = 0
        else:  # 11 bits: room to count up in this millisecond
            _counter = (next(_draws, None) or _fresh_draw()) & 0x7FF
        _last_ms = ms
        counter = _counter
        random = (next(_draws, None) or _fresh_draw()) & 0x3FFF_FFFF_FFFF_FFFF  # 62 bits
    # UUID(int=...) without its checks (an id is minted for every job enqueued).
    minted = _new_uuid(UUID)
    _set(minted, "int", (ms & 0xFFFF_FFFF_FFFF) << 80 | _VERSION_7 | counter << 64 | random)
    _set(minted, "is_safe", _SAFE_UNKNOWN)
    return minted


_VERSION_7 = 0x7 << 76 | 0b10 << 62
"""The version (7) and variant (RFC 9562) bits."""
_new_uuid = UUID.__new__
_set = object.__setattr__
_SAFE_UNKNOWN = SafeUUID.unknown
