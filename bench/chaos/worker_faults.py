"""Chaos scenarios of a worker that stalls, dies, or is killed by its own job, and of a
message whose data carries another id than the one it was queued under.

=====================  =====================================================================
scenario               fault
=====================  =====================================================================
``stalled_worker``     a worker SIGSTOPped past its heartbeat timeout while it runs ``slow``
                       jobs and holds prefetched ones, then SIGCONTed once another worker
                       finished them all
``poison_job``         jobs that kill their worker process every time, among plain ones;
                       every dead worker is replaced
``mismatched_id``      raw messages queued under one id whose data carries another
``dead_worker``        a worker SIGKILLed while it holds ``slow`` jobs; another one running
=====================  =====================================================================

Figures that must be 0: ``lost``, ``duplicated`` (a ``slow`` job's effect committed twice,
or a run settled twice), ``stuck``, ``extra_attempts`` and ``late``. A poison job is lost
unless it ends ``failed`` with ``worker_died``; a mismatched message is lost unless it is
dead-lettered under its queued id and in no ack set; a dead worker's messages are late when
they are back in their queues later than the heartbeat timeout plus a poll (and a 1.5 s
margin) after the kill (its heartbeat stopped then, or a little before).
"""

from __future__ import annotations

import os
import signal
import time
from typing import Any, cast

import redis

from bench.chaos.cluster import (
    POLL_MS,
    WORKER_SETTINGS,
    Workers,
    enqueue,
    mixed_requests,
    wait_for_completion,
)
from bench.chaos.scenarios import Row, _items, _row, stores
from bench.chaos.workload import ledger_key
from tiers.redis_values import as_text

TIMEOUT_S = float(WORKER_SETTINGS["heartbeat_timeout_seconds"])
#: The bound a dead worker's messages must be back in their queues within, from the kill.
RETURN_BOUND_S = TIMEOUT_S + POLL_MS / 1000 + 1.5


def _wait(probe: Any, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if probe():
            return True
        time.sleep(0.05)
    return False


def _started(client: redis.Redis, ns: str) -> int:
    return int(client.hlen(ledger_key(ns, "starts")))


def stalled_worker(database_url: str | None, *, jobs: int, timeout: float = 120) -> Row:
    """One worker stalls with ``slow`` jobs running and prefetched; a second one takes them
    over; the first resumes."""
    with stores(database_url) as (shared, server, _pg, platform):
        client = redis.Redis.from_url(server.url)
        requests = mixed_requests(jobs, kinds=("slow",))
        stalled = Workers(shared, count=1, threads=4)
        rescuer = Workers(shared, count=1, threads=8)
        started = time.time()
        stalled.start()
        victim = stalled.processes[0]
        assert victim.pid is not None
        try:
            enqueue(platform.router, requests)
            _wait(lambda: _started(client, shared.namespace) >= 4, 60)
            os.kill(victim.pid, signal.SIGSTOP)
            rescuer.start()
            wait_for_completion(client, shared.namespace, _items(requests), timeout=timeout)
            os.kill(victim.pid, signal.SIGCONT)
            time.sleep(3.0)  # its frozen runs end, its prefetched copies meet their start
        finally:
            os.kill(victim.pid, signal.SIGCONT)
            stalled.stop()
            rescuer.stop()
        return _row(
            "stalled_worker",
            client,
            shared.namespace,
            _items(requests),
            f"1 worker stalled {TIMEOUT_S:.0f}s+ holding jobs, then resumed",
            started,
            None,
            0,
        )


def poison_job(database_url: str | None, *, jobs: int, poison: int, timeout: float = 120) -> Row:
    """``poison`` jobs that kill their worker every time among ``jobs`` plain ones; dead
    workers are replaced until the work is done."""
    with stores(database_url) as (shared, server, _pg, platform):
        client = redis.Redis.from_url(server.url)
        requests = mixed_requests(jobs, kinds=("plain",))
        poisoned = mixed_requests(poison, kinds=("poison",), start=jobs)
        workers = Workers(shared, count=2, threads=4)
        started = time.time()
        workers.start()
        deaths = 0
        try:
            enqueue(platform.router, poisoned + requests)
            items = _items(requests)
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                for at, process in enumerate(workers.processes):
                    if process.exitcode is not None:
                        deaths += 1
                        workers.processes[at] = workers._spawn()
                ns = shared.namespace
                if _all_completed(client, ns, items) and all(
                    _failed_as_worker_died(client, ns, p) for p in poisoned
                ):
                    break
                time.sleep(0.25)
        finally:
            workers.stop()
        row = _row(
            "poison_job",
            client,
            shared.namespace,
            _items(requests),
            f"{poison} job(s) killing their worker every time ({deaths} deaths)",
            started,
            None,
            0,
        )
        row.lost += sum(
            1 for p in poisoned if not _failed_as_worker_died(client, shared.namespace, p)
        )
        return row


def mismatched_id(
    database_url: str | None, *, jobs: int, messages: int, timeout: float = 60
) -> Row:
    """``messages`` raw messages queued under ids their data does not carry, among
    ``jobs`` plain ones."""
    from dramatiq.message import Message

    from tiers.options import JOB_ID, REDIS_MESSAGE_ID

    with stores(database_url) as (shared, server, _pg, platform):
        client = redis.Redis.from_url(server.url)
        ns = shared.namespace
        queue = platform.registry.queues_of_tier("fast")[0]
        queued = [f"queued-{n}" for n in range(messages)]
        for n, redis_id in enumerate(queued):
            message: Message[Any] = Message(
                queue_name=queue,
                actor_name="chaos_plain",
                args=(),
                kwargs={"organization_id": 1, "item": f"raw-{n}", "kind": "plain"},
                options={JOB_ID: f"chaos-raw-{n}", REDIS_MESSAGE_ID: f"carried-{n}"},
            )
            client.hset(f"{ns}:{queue}.msgs", redis_id, message.encode())
            client.rpush(f"{ns}:{queue}", redis_id)
        requests = mixed_requests(jobs, kinds=("plain",))
        workers = Workers(shared, count=1, threads=4)
        started = time.time()
        workers.start()
        try:
            enqueue(platform.router, requests)
            wait_for_completion(client, ns, _items(requests), timeout=timeout)
            _wait(lambda: all(_dead_lettered(client, ns, queue, i) for i in queued), 10)
        finally:
            workers.stop()
        row = _row(
            "mismatched_id",
            client,
            ns,
            _items(requests),
            f"{messages} message(s) queued under another id than they carry",
            started,
            None,
            0,
        )
        row.lost += sum(1 for i in queued if not _dead_lettered(client, ns, queue, i))
        row.duplicated += sum(
            int(client.hget(ledger_key(ns, "starts"), f"raw-{n}") or 0) for n in range(messages)
        )
        return row


def dead_worker(database_url: str | None, *, jobs: int, timeout: float = 120) -> Row:
    """A worker SIGKILLed while it holds ``slow`` jobs, another one running: the dead
    worker's messages must be back in their queues (its ack sets gone) within the
    heartbeat timeout plus a poll."""
    with stores(database_url) as (shared, server, _pg, platform):
        client = redis.Redis.from_url(server.url)
        ns = shared.namespace
        heartbeats = f"{ns}:__heartbeats__"
        requests = mixed_requests(jobs, kinds=("slow",))
        dying = Workers(shared, count=1, threads=8)
        survivor = Workers(shared, count=1, threads=4)
        started = time.time()
        dying.start()
        try:
            _wait(lambda: client.zcard(heartbeats) >= 1, 60)
            [dead_id] = [
                as_text(cast(bytes, member)) for member in client.zrange(heartbeats, 0, -1)
            ]
            survivor.start()
            _wait(lambda: client.zcard(heartbeats) >= 2, 60)
            enqueue(platform.router, requests)
            _wait(lambda: _held_by(client, ns, dead_id) > 0, 60)
            victim = dying.processes[0]
            assert victim.pid is not None
            os.kill(victim.pid, signal.SIGKILL)
            killed = time.time()
            returned = killed + timeout
            if _wait(lambda: _held_by(client, ns, dead_id) == 0, timeout):
                returned = time.time()
            wait_for_completion(client, ns, _items(requests), timeout=timeout)
        finally:
            dying.stop()
            survivor.stop()
        row = _row(
            "dead_worker",
            client,
            ns,
            _items(requests),
            "1 worker SIGKILLed holding jobs",
            started,
            returned - killed,
            0,
        )
        row.late = int(returned - killed > RETURN_BOUND_S)
        return row


def _held_by(client: redis.Redis, ns: str, worker_id: str) -> int:
    """Messages in ``worker_id``'s ack sets (fetched, not acked)."""
    return sum(int(client.scard(key)) for key in client.scan_iter(f"{ns}:__acks__.{worker_id}.*"))


def _failed_as_worker_died(client: redis.Redis, ns: str, request: Any) -> bool:
    state, error = client.hmget(f"{ns}:job:chaos-{request.params['item']}", "state", "last_error")
    return state == b"failed" and as_text(error or b"").startswith("worker_died")


def _all_completed(client: redis.Redis, ns: str, items: list[str]) -> bool:
    pipe = client.pipeline(transaction=False)
    for item in items:
        pipe.hget(f"{ns}:job:chaos-{item}", "state")
    return all(state == b"completed" for state in pipe.execute())


def _dead_lettered(client: redis.Redis, ns: str, queue: str, redis_id: str) -> bool:
    in_acks = any(client.sismember(key, redis_id) for key in client.scan_iter(f"{ns}:__acks__.*"))
    return client.zscore(f"{ns}:{queue}.XQ", redis_id) is not None and not in_acks
