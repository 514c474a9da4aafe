"""A fetch's screen: which fetched messages a worker can run, and a dead letter for the others.

A fetched message no worker can run must neither stop the consumer nor come back: it is
dead-lettered under the id it was fetched under, and its job failed, in one step
(``JobStore.reject``), with an error in the log that quotes the start of its data:

===========================================  ===============================================
the fetched message                          the reason it is dead-lettered with
===========================================  ===============================================
cannot be decoded                            ``undecodable message: <error>``
carries no redis message id                  ``message without a redis message id``
carries another redis id than the one it     ``message queued as <id> carries id <id>``: its
was queued under                             acks would name an id the queue does not hold
carries no job id                            ``message without a job id (enqueue through
                                             the router)``
is for an actor this worker does not have    ``no actor '<name>' in this worker``
===========================================  ===============================================

The id it is dead-lettered under is the one the fetch answered with; a fetch that does not
say (a delay queue's) leaves the message's own, or, for undecodable data, one found for that
data among the worker's unacked messages of the queue. A message whose id cannot be found is
left as it is, with an error in the log.
"""

from __future__ import annotations

import logging
from collections.abc import Container, Sequence
from typing import Any, NamedTuple

from dramatiq.message import Message

from tiers.job_store import JobStore
from tiers.options import JOB_ID, REDIS_MESSAGE_ID
from tiers.redis_values import as_text

#: A fetch's dead letters are logged as the rest of the broker's fetch is.
log = logging.getLogger("tiers.broker")


class Rejected(NamedTuple):
    """A fetched message no worker can run."""

    data: bytes
    #: None: it could not be decoded.
    message: Message[Any] | None
    reason: str
    #: The redis id the fetch answered with it (None: the fetch did not say).
    fetched_id: str | None


def screen(
    data: bytes, fetched_id: str | None, actors: Container[str]
) -> tuple[Message[Any] | None, str]:
    """The decoded message and, when no worker with ``actors`` can run it, why ("" when
    one can)."""
    try:
        message = Message.decode(data)
    except Exception as exc:
        return None, f"undecodable message: {exc}"
    options = message.options
    if not isinstance(options.get(REDIS_MESSAGE_ID), str):
        return message, "message without a redis message id"
    if fetched_id is not None and options[REDIS_MESSAGE_ID] != fetched_id:
        # Its acks and settles would name an id the queue does not hold: it would run,
        # and stay in the worker's ack set, to come back after every restart.
        return message, f"message queued as {fetched_id} carries id {options[REDIS_MESSAGE_ID]}"
    if not isinstance(options.get(JOB_ID), str) or not options[JOB_ID]:
        return message, "message without a job id (enqueue through the router)"
    if message.actor_name not in actors:
        return message, f"no actor {message.actor_name!r} in this worker"
    return message, ""


def screen_fetch(
    fetched: Sequence[bytes | None],
    fetched_ids: Sequence[str] | None,
    actors: Container[str],
) -> tuple[list[tuple[int, Message[Any]]], list[Rejected]]:
    """The fetched messages a worker with ``actors`` can run, decoded, with their places in
    ``fetched``; and the others. ``fetched_ids``: the redis ids the fetch answered with, in
    order (None: not known)."""
    runnable: list[tuple[int, Message[Any]]] = []
    rejected: list[Rejected] = []
    for at, data in enumerate(fetched):
        if data is None:
            continue
        fetched_id = fetched_ids[at] if fetched_ids is not None else None
        message, reason = screen(data, fetched_id, actors)
        if reason:
            rejected.append(Rejected(data, message, reason, fetched_id))
            continue
        assert message is not None
        runnable.append((at, message))
    return runnable, rejected


def dead_letter(
    jobs: JobStore, worker_id: str, queue_name: str, rejected: Sequence[Rejected]
) -> None:
    """Dead-letter the ``rejected`` messages a worker (``worker_id``) fetched from
    ``queue_name`` and fail their jobs, in one step."""
    entries: list[tuple[str, str, str]] = []
    unknown = [r.data for r in rejected if r.message is None and r.fetched_id is None]
    found = _ids_of(jobs, worker_id, queue_name, unknown) if unknown else {}
    for data, message, reason, fetched_id in rejected:
        options = message.options if message is not None else {}
        redis_id = fetched_id or options.get(REDIS_MESSAGE_ID)
        if redis_id is None and found.get(data):
            redis_id = found[data].pop()
        if not isinstance(redis_id, str):
            log.error("%s on %s: its id could not be found; left as is", reason, queue_name)
            continue
        job_id = options.get(JOB_ID)
        entries.append((redis_id, job_id if isinstance(job_id, str) else "", reason))
        log.error(
            "dead-lettered message %s on %s (job %s): %s; data starts %r",
            redis_id,
            queue_name,
            job_id or "-",
            reason,
            data[:200],
        )
    if entries:
        jobs.reject(queue_name, worker_id, entries)


def _ids_of(
    jobs: JobStore, worker_id: str, queue_name: str, datas: Sequence[bytes]
) -> dict[bytes, list[str]]:
    """Redis ids of fetched messages known only by their data (undecodable ones), found
    among the worker's unacked messages of the queue; identical data, several ids."""
    client, namespace = jobs.client, jobs.namespace
    acks = f"{namespace}:__acks__.{worker_id}.{queue_name}"
    ids = [as_text(i) for i in client.smembers(acks)]
    if not ids:
        return {}
    values = client.hmget(f"{namespace}:{queue_name}.msgs", ids)
    wanted = set(datas)
    found: dict[bytes, list[str]] = {}
    for redis_id, value in zip(ids, values, strict=True):
        if value in wanted:
            found.setdefault(value, []).append(redis_id)
    return found
