"""Values as the platform's scripts read and write them: Redis replies as text, times as
milliseconds since the epoch."""

from __future__ import annotations

import time


def as_text(value: bytes | str) -> str:
    """A reply of Redis (bytes, as Dramatiq's client answers) as a string."""
    return value.decode() if isinstance(value, bytes) else value


def now_ms() -> int:
    return int(time.time() * 1000)
