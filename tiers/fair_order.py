"""Where a queue's ready messages wait, for the code that reads them without running them
(queue depths, the dashboard, the watch, tests).

A main queue's ready messages are in two places (``tiers/lua/_fair.lua`` keeps the second):

=====================  ==========================================================  ========
key                    what waits there                                            fetched
=====================  ==========================================================  ========
``<ns>:<queue>``       Dramatiq's list: ungrouped messages, and any message handed  first
                       back or returned from a dead worker
``<ns>:<queue>.fq``    the fair order: admitted grouped messages, scored by their   then
                       group's virtual time (lowest first)
=====================  ==========================================================  ========

Both keep their data in ``<ns>:<queue>.msgs``, so Dramatiq's acks, nacks and hand-backs
work on either.
"""

from __future__ import annotations

from typing import Any

from tiers.redis_values import as_text


def list_key(namespace: str, queue: str) -> str:
    """Dramatiq's list of the queue's ready messages."""
    return f"{namespace}:{queue}"


def fair_key(namespace: str, queue: str) -> str:
    """The sorted set of the queue's admitted grouped messages, in the order they are
    fetched."""
    return f"{namespace}:{queue}.fq"


def count_ready(pipe: Any, namespace: str, queue: str) -> None:
    """Add to a pipeline the two counts whose sum is how many messages of ``queue`` are
    ready (read them with :func:`ready_from`)."""
    pipe.llen(list_key(namespace, queue))
    pipe.zcard(fair_key(namespace, queue))


def ready_from(replies: Any) -> int:
    """The ready count from the next two replies of an iterator over a pipeline's replies
    (:func:`count_ready`)."""
    return int(next(replies)) + int(next(replies))


def ready_count(client: Any, namespace: str, queue: str) -> int:
    """How many messages of ``queue`` are ready (one round trip)."""
    pipe = client.pipeline(transaction=False)
    count_ready(pipe, namespace, queue)
    return ready_from(iter(pipe.execute()))


def ready_ids(client: Any, namespace: str, queue: str) -> list[str]:
    """The redis ids of the queue's ready messages, in the order they are fetched."""
    pipe = client.pipeline(transaction=False)
    pipe.lrange(list_key(namespace, queue), 0, -1)
    pipe.zrange(fair_key(namespace, queue), 0, -1)
    listed, fair = pipe.execute()
    return [as_text(redis_id) for redis_id in [*listed, *fair]]


def place_of(pipe: Any, namespace: str, queue: str, redis_id: str) -> None:
    """Add to a pipeline the three replies :func:`place_from` reads: where ``redis_id``
    stands among the queue's ready messages."""
    pipe.lpos(list_key(namespace, queue), redis_id)
    pipe.llen(list_key(namespace, queue))
    pipe.zrank(fair_key(namespace, queue), redis_id)


def place_from(replies: Any) -> int | None:
    """How many ready messages are fetched before the one asked about (None: not ready),
    from the next three replies (:func:`place_of`)."""
    listed, length, ranked = next(replies), next(replies), next(replies)
    if listed is not None:
        return int(listed)
    if ranked is not None:
        return int(length) + int(ranked)
    return None
