"""The opaque keyset cursor codec.

A cursor is the sort key of the last row a page returned, tagged with its kind and a
CRC-32, base64url-encoded. Any string that does not decode to a cursor of the expected
kind raises :class:`InvalidCursor`: paging never restarts quietly.
"""

from __future__ import annotations

import base64
import binascii
import struct
import zlib
from datetime import UTC, datetime, timedelta
from uuid import UUID

from millrace_django.errors import InvalidCursor

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_STAMP = struct.Struct(">q")


def _micros(instant: datetime) -> int:
    return (instant - _EPOCH) // timedelta(microseconds=1)


def _instant(micros: int) -> datetime:
    return _EPOCH + timedelta(microseconds=micros)


_CHECK = struct.Struct(">I")


def _encode(kind: bytes, payload: bytes) -> str:
    raw = kind + payload
    raw += _CHECK.pack(zlib.crc32(raw))
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


def _decode(kind: bytes, cursor: str) -> bytes:
    """The payload of a cursor of ``kind``, or :class:`InvalidCursor`."""
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        raw = base64.urlsafe_b64decode(padded.encode("ascii"))
    except (binascii.Error, ValueError, UnicodeEncodeError) as error:
        raise InvalidCursor(f"undecodable paging cursor {cursor!r}") from error
    body, check = raw[: -_CHECK.size], raw[-_CHECK.size :]
    valid = len(raw) > len(kind) + _CHECK.size and body.startswith(kind)
    if not valid or _CHECK.unpack(check)[0] != zlib.crc32(body):
        raise InvalidCursor(f"undecodable paging cursor {cursor!r}")
    return body[len(kind) :]


def encode_time_id(instant: datetime, row_id: UUID) -> str:
    """Cursor for rows ordered by (time, uuid): jobs and workflow instances."""
    return _encode(b"U", _STAMP.pack(_micros(instant)) + row_id.bytes)


def decode_time_id(cursor: str) -> tuple[datetime, UUID]:
    raw = _decode(b"U", cursor)
    if len(raw) != _STAMP.size + 16:
        raise InvalidCursor(f"undecodable paging cursor {cursor!r}")
    try:
        return _instant(_STAMP.unpack(raw[:8])[0]), UUID(bytes=raw[8:])
    except OverflowError as error:
        raise InvalidCursor(f"undecodable paging cursor {cursor!r}") from error


def encode_time_text(instant: datetime, row_id: str) -> str:
    """Cursor for rows ordered by (time, text id): recurring definitions."""
    return _encode(b"T", _STAMP.pack(_micros(instant)) + row_id.encode("utf-8"))


def decode_time_text(cursor: str) -> tuple[datetime, str]:
    raw = _decode(b"T", cursor)
    if len(raw) <= _STAMP.size:
        raise InvalidCursor(f"undecodable paging cursor {cursor!r}")
    try:
        return _instant(_STAMP.unpack(raw[:8])[0]), raw[8:].decode("utf-8")
    except (OverflowError, UnicodeDecodeError) as error:
        raise InvalidCursor(f"undecodable paging cursor {cursor!r}") from error
