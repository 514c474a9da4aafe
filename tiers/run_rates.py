"""Measured rates: runs ended per queue and per group, and window starts, per minute.

The dashboard predicts when an organization's next job starts from how fast its queue and
its group have been turning over; every worker measures that, in Redis. One hash per UTC
minute, kept two hours:

===============================  ==========================================================
``<ns>:rates:<minute>`` field    counts, in that minute
===============================  ==========================================================
``q:<queue>``                    runs that ended in the queue (any outcome: each freed a
                                 worker thread, and a group slot when it held one)
``g:<group key>``                runs of that group (``<queue>|<organization>``) that ended
``w:<window key>``               starts a provider window admitted (``st_window``)
===============================  ==========================================================

A run is counted by the script that settles it (``lua/settle.lua``), in the same step as
its outcome: no round trip of its own. :func:`run_count` says what to count.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any, NamedTuple

import redis
from dramatiq.common import q_name

from tiers.options import GROUP, WINDOW_ADMITTED
from tiers.redis_values import as_text

#: How long a minute's counts are kept.
KEEP_SECONDS = 2 * 3600


def minute_of(epoch_seconds: float) -> int:
    return int(epoch_seconds // 60)


def rates_key(namespace: str, minute: int) -> str:
    return f"{namespace}:rates:{minute}"


class RunCount(NamedTuple):
    """What one ended run adds to the rates: 1 to each of ``fields`` of hash ``key``, which
    is kept ``keep_seconds``."""

    key: str
    keep_seconds: int
    fields: tuple[str, ...]


def run_count(namespace: str, message: Any, now: float | None = None) -> RunCount:
    """The count of one run of ``message`` that ends ``now``."""
    options = message.options
    fields = [f"q:{q_name(message.queue_name)}"]
    if options.get(GROUP):
        fields.append(f"g:{options[GROUP]}")
    admitted = options.get(WINDOW_ADMITTED)
    if isinstance(admitted, str) and "#" in admitted:
        fields.append(f"w:{admitted.rpartition('#')[0]}")
    minute = minute_of(time.time() if now is None else now)
    return RunCount(rates_key(namespace, minute), KEEP_SECONDS, tuple(fields))


def recent_minutes(
    client: redis.Redis, namespace: str, minutes: int, now: float | None = None
) -> list[tuple[int, Counter[str]]]:
    """``(minute, field -> count)`` for the last ``minutes`` whole minutes and the current
    one, oldest first."""
    current = minute_of(time.time() if now is None else now)
    span = range(current - minutes, current + 1)
    pipe = client.pipeline(transaction=False)
    for minute in span:
        pipe.hgetall(rates_key(namespace, minute))
    return [
        (minute, Counter({as_text(field): int(value) for field, value in reply.items()}))
        for minute, reply in zip(span, pipe.execute(), strict=True)
    ]


def recent_counts(
    client: redis.Redis, namespace: str, minutes: int, now: float | None = None
) -> Counter[str]:
    """Field -> count summed over the last ``minutes`` whole minutes and the current one."""
    total: Counter[str] = Counter()
    for _minute, counts in recent_minutes(client, namespace, minutes, now):
        total.update(counts)
    return total
