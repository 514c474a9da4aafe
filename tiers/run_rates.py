"""Measured rates: runs ended per queue and per group, and window starts, per minute.

The dashboard predicts when an organization's next job starts from how fast its queue and
its group have been turning over; this middleware measures that, in Redis, for every
worker. One hash per UTC minute, kept two hours:

===============================  ==========================================================
``<ns>:rates:<minute>`` field    counts, in that minute
===============================  ==========================================================
``q:<queue>``                    runs that ended in the queue (any outcome: each freed a
                                 worker thread, and a group slot when it held one)
``g:<group key>``                runs of that group (``<queue>|<organization>``) that ended
``w:<window key>``               starts a provider window admitted (``st_window``)
===============================  ==========================================================

One pipelined round trip per run; a Redis error here is logged and never fails the job.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from typing import Any

import redis
from dramatiq.broker import Broker
from dramatiq.common import q_name
from dramatiq.middleware import Middleware

from tiers.job_store import as_text
from tiers.options import GROUP, JOB_ID, WINDOW_ADMITTED

log = logging.getLogger(__name__)

#: How long a minute's counts are kept.
KEEP_SECONDS = 2 * 3600


def minute_of(epoch_seconds: float) -> int:
    return int(epoch_seconds // 60)


def rates_key(namespace: str, minute: int) -> str:
    return f"{namespace}:rates:{minute}"


class RunRates(Middleware):
    """Count each ended run (and the window start it took) in the minute's hash.

    Parameters:
      client: the broker's Redis client.
      namespace: the broker's key prefix.
    """

    def __init__(self, client: redis.Redis, namespace: str) -> None:
        self.client = client
        self.namespace = namespace

    def after_process_message(
        self,
        broker: Broker,
        message: Any,
        *,
        result: Any = None,
        exception: BaseException | None = None,
    ) -> None:
        options = message.options
        if JOB_ID not in options:
            return
        key = rates_key(self.namespace, minute_of(time.time()))
        try:
            pipe = self.client.pipeline(transaction=False)
            pipe.hincrby(key, f"q:{q_name(message.queue_name)}", 1)
            if options.get(GROUP):
                pipe.hincrby(key, f"g:{options[GROUP]}", 1)
            admitted = options.get(WINDOW_ADMITTED)
            if isinstance(admitted, str) and "#" in admitted:
                pipe.hincrby(key, f"w:{admitted.rpartition('#')[0]}", 1)
            pipe.expire(key, KEEP_SECONDS)
            pipe.execute()
        except redis.RedisError as exc:
            log.warning("run rates not recorded (%s)", exc)


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
