"""Operator cancels of queued and running jobs, and what each worker says it is doing.

==========================  ================================================================
where the job is            what a cancel does
==========================  ================================================================
waiting, parked, delayed    its next delivery ends before the actor, as ``cancelled`` (the
                            group slot it took passes on, as after any run)
active (running)            the handler meets ``Cancelled`` at its next cancel point (a step
                            of ``run_steps``, a provider call through ``JsonClient``) within
                            a second (:data:`POLL_SECONDS`); once the grace
                            (``SPEEDTIER_CANCEL_GRACE_SECONDS``) has passed, ``Cancelled``
                            is raised into its thread: a hard stop, landing as soon as the
                            thread runs Python code again (a call blocked in C, such as a
                            socket read, ends at its own timeout first)
finished, or no record      refused: ``not_live`` / ``no_job``
already asked               ``already`` (the first request stands)
==========================  ================================================================

A cancelled run settles through the outcomes middleware like any other: state
``cancelled``, ``last_error`` naming who cancelled it, never retried, never dead-lettered,
record kept for its family's retention. The request is one script: it checks the record is
live, notes the cancel in ``<ns>:__cancels__`` (job id -> ``at_ms|operator``) and on the
record (``cancel_by``, ``cancel_at``). Workers read the whole hash once a second (it holds
only the cancels in flight), so a cancel costs no Redis call per job; the entry is dropped
when its job ends for good, or after :data:`MAX_AGE_MS`.

Workers also publish themselves in ``<ns>:__workers__`` (broker id -> JSON: host, pid,
queues, threads, the jobs running with their start): the dashboard's Busy page and its "no
worker serves this tier" read it, with ``<ns>:__heartbeats__`` saying which are alive.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from typing import Any

import redis

from tiers.job_store import as_text, now_ms

#: How often a worker reads the cancels and republishes what it runs.
POLL_SECONDS = 1.0
#: A cancel whose job never came up again is forgotten after this long.
MAX_AGE_MS = 7 * 86_400_000
#: A worker republishes itself at least this often while nothing changes.
PUBLISH_EVERY_SECONDS = 10.0

_REQUEST = """
local state = redis.call('hget', KEYS[1], 'state')
if not state then return 'no_job' end
if state ~= 'waiting' and state ~= 'parked' and state ~= 'delayed' and state ~= 'active' then
    return 'not_live'
end
if redis.call('hexists', KEYS[2], ARGV[1]) == 1 then return 'already' end
redis.call('hset', KEYS[2], ARGV[1], ARGV[2] .. '|' .. ARGV[3])
redis.call('hset', KEYS[1], 'cancel_by', ARGV[3], 'cancel_at', ARGV[2])
return 'requested'
"""


def cancels_key(namespace: str) -> str:
    return f"{namespace}:__cancels__"


def workers_key(namespace: str) -> str:
    return f"{namespace}:__workers__"


@dataclass(frozen=True)
class CancelRequest:
    """A cancel in flight: when it was asked (epoch ms) and by whom."""

    at_ms: int
    operator: str


def request_cancel(client: redis.Redis, namespace: str, job_id: str, operator: str) -> str:
    """Ask for job ``job_id`` to be cancelled. Returns ``requested``, or why not:
    ``already``, ``not_live`` (it finished), ``no_job``."""
    script = client.register_script(_REQUEST)
    reply = script(
        keys=[f"{namespace}:job:{job_id}", cancels_key(namespace)],
        args=[job_id, now_ms(), operator.replace("|", "/")],
    )
    return as_text(reply)


def read_cancels(client: redis.Redis, namespace: str) -> dict[str, CancelRequest]:
    """Every cancel in flight; entries older than :data:`MAX_AGE_MS` are dropped."""
    raw: Any = client.hgetall(cancels_key(namespace))
    found: dict[str, CancelRequest] = {}
    expired = []
    oldest = now_ms() - MAX_AGE_MS
    for key, value in raw.items():
        at, _, operator = as_text(value).partition("|")
        request = CancelRequest(int(at) if at.isdigit() else 0, operator)
        if request.at_ms < oldest:
            expired.append(key)
        else:
            found[as_text(key)] = request
    if expired:
        client.hdel(cancels_key(namespace), *expired)
    return found


def forget_cancel(client: redis.Redis, namespace: str, job_id: str) -> None:
    client.hdel(cancels_key(namespace), job_id)


@dataclass
class WorkerInfo:
    """A worker process as it published itself, and whether its heartbeat is fresh."""

    worker_id: str
    host: str
    pid: int
    queues: list[str]
    threads: int
    running: list[dict[str, Any]] = field(default_factory=list)  # {"job", "started_ms"}
    alive: bool = True

    @property
    def tiers(self) -> set[str]:
        return {queue.rpartition(".")[2] for queue in self.queues}


def publish_worker(
    client: redis.Redis, namespace: str, worker_id: str, info: dict[str, Any]
) -> None:
    client.hset(workers_key(namespace), worker_id, json.dumps(info))


def unpublish_worker(client: redis.Redis, namespace: str, worker_id: str) -> None:
    client.hdel(workers_key(namespace), worker_id)


def live_workers(
    client: redis.Redis, namespace: str, heartbeat_timeout_ms: int
) -> tuple[list[WorkerInfo], int]:
    """The workers whose heartbeat is fresh and that published themselves, and how many
    workers with a fresh heartbeat did not (an older version: their queues are unknown)."""
    beats: Any = client.zrange(f"{namespace}:__heartbeats__", 0, -1, withscores=True)
    fresh_after = now_ms() - heartbeat_timeout_ms
    alive = {as_text(member) for member, score in beats if score >= fresh_after}
    published: Any = client.hgetall(workers_key(namespace))
    workers = []
    for key, value in published.items():
        worker_id = as_text(key)
        if worker_id not in alive:
            continue
        try:
            data = json.loads(as_text(value))
        except ValueError:
            continue
        workers.append(
            WorkerInfo(
                worker_id,
                str(data.get("host", "?")),
                int(data.get("pid", 0)),
                [str(q) for q in data.get("queues", [])],
                int(data.get("threads", 0)),
                list(data.get("running", [])),
            )
        )
    unpublished = len(alive - {w.worker_id for w in workers})
    return workers, unpublished


def seconds_since(ms: int, now: float | None = None) -> float:
    return max(0.0, (time.time() if now is None else now) - ms / 1000)
