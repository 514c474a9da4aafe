"""Keep retrying a Redis call while the server is unreachable.

A worker thread that cannot record a job's outcome must not let Dramatiq ack the message (the
job would be lost); it waits for Redis instead, as Dramatiq itself does for acks.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TypeVar

import redis

T = TypeVar("T")
#: What redis-py raises when the server does not answer.
REDIS_DOWN = (redis.ConnectionError, redis.TimeoutError)
#: What a Redis that answers but refuses writes for now raises: out of memory (``maxmemory``
#: under ``noeviction``) or a read-only replica (a failover in progress). An outage like
#: REDIS_DOWN for whoever waits for it to end.
REDIS_REFUSING = (redis.exceptions.OutOfMemoryError, redis.exceptions.ReadOnlyError)
log = logging.getLogger(__name__)


def until_redis_answers(call: Callable[[], T], *, what: str, max_wait: float = 0.5) -> T:
    """Run ``call``; on a connection or timeout error wait (0.1 s doubling to ``max_wait``)
    and try again, logging each failure. The wait stays short: a thread holding a finished
    job's outcome should record it within a moment of Redis coming back."""
    wait = 0.1
    while True:
        try:
            return call()
        except REDIS_DOWN as exc:
            log.warning("redis unreachable while %s (%s); retrying in %.1fs", what, exc, wait)
            time.sleep(wait)
            wait = min(wait * 2, max_wait)
