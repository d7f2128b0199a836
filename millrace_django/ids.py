"""Time-ordered (UUIDv7, RFC 9562) ids minted from the injected clock.

Ids sort by creation time, so indexes on them stay append-mostly. Within one millisecond
a 12-bit counter keeps ids from one process strictly increasing. An id always carries its
clock's time: a clock behind the last one minted (another clock, in tests) starts afresh.
"""

from __future__ import annotations

import secrets
import threading
from uuid import UUID

from millrace_django.clock import Clock

_lock = threading.Lock()
_last_ms = -1
_counter = 0


def new_id(clock: Clock) -> UUID:
    """Mint a UUIDv7 whose timestamp is ``clock.now()``."""
    global _last_ms, _counter
    ms = int(clock.now().timestamp() * 1000)
    with _lock:
        if _last_ms - 1 <= ms <= _last_ms:  # this millisecond, or one borrowed after it
            ms = _last_ms
            _counter += 1
            if _counter > 0xFFF:  # 4096 ids in one millisecond: borrow the next one
                ms += 1
                _counter = 0
        else:
            _counter = secrets.randbits(11)
        _last_ms = ms
        counter = _counter
    value = (ms & 0xFFFF_FFFF_FFFF) << 80
    value |= 0x7 << 76
    value |= counter << 64
    value |= 0b10 << 62
    value |= secrets.randbits(62)
    return UUID(int=value)
