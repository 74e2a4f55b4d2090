"""Time-ordered ids (UUIDv7), so keyset pagination by id follows creation order."""

from __future__ import annotations

import os
import threading
import time
import uuid

from memsvc.core.errors import ValidationError

_lock = threading.Lock()
_last_millis = 0
_sequence = 0


def new_id() -> uuid.UUID:
    """A new UUIDv7 (RFC 9562): Unix milliseconds, a sequence, then random bits.

    Within one process ids increase strictly: the 12-bit field after the
    version counts up inside a millisecond (borrowing the next one if needed).
    """
    global _last_millis, _sequence
    with _lock:
        millis = time.time_ns() // 1_000_000
        if millis > _last_millis:
            _last_millis = millis
            _sequence = int.from_bytes(os.urandom(2), "big") & 0x3FF
        else:
            _sequence += 1
            if _sequence > 0xFFF:
                _last_millis += 1
                _sequence = 0
        millis, sequence = _last_millis, _sequence
    rand_b = int.from_bytes(os.urandom(8), "big") & ((1 << 62) - 1)
    value = (millis & ((1 << 48) - 1)) << 80 | 0x7 << 76 | sequence << 64
    value |= 0b10 << 62 | rand_b
    return uuid.UUID(int=value)


def parse_id(field: str, value: object) -> uuid.UUID:
    """Accept a UUID or its string form; anything else is a ValidationError."""
    if isinstance(value, uuid.UUID):
        return value
    if isinstance(value, str):
        try:
            return uuid.UUID(value)
        except ValueError:
            pass
    raise ValidationError(field, "must be a UUID")
