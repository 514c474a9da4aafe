"""Chaos scenarios of stores that answer badly rather than not at all: a stalled Redis, a
full Redis, an evicting Redis, a read-only PostgreSQL. Same rules as ``scenarios``: real
worker processes, a Redis of the suite's own, one row each, every figure must be 0.

=======================  ==================================================================
scenario                 fault, and what counts against it
=======================  ==================================================================
``redis_stall``          Redis SIGSTOPped past the enqueuer's socket timeout while batches
                         arrive; the caller follows the API's contract (resend what was
                         refused; look up what is unknown, resend what is missing). An
                         answer "nothing was enqueued" for a job that ran is a duplicate
``redis_full``           Redis at ``maxmemory`` under ``noeviction`` while batches arrive
                         and workers run; a refused batch of which any job was taken is a
                         duplicate (half-accepted), a refusal that is not ``QueueFull`` is
                         an extra attempt
``evicting_redis``       a production start on an ``allkeys-lru`` Redis must be refused;
                         a start is counted as every job lost
``postgres_read_only``   the database made read-only and its sessions ended (a failover)
                         while jobs write to it; attempts spent on it are extra attempts
``connection_kills``     every client connection of the workers dropped (``CLIENT KILL``)
                         again and again during a drain: fetches, claims, starts, settles
                         and acks all meet a lost connection. The recovery is the longest
                         time from a kill to the next completion (a settle or ack retried
                         on the settle sender's thread would hold the others for seconds)
=======================  ==================================================================
"""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any

import redis

from bench.chaos.cluster import (
    Stores,
    Workers,
    enqueue,
    mixed_requests,
    settings_for,
    tally,
    wait_for_completion,
)
from bench.chaos.scenarios import (
    Row,
    _designed_failures,
    _first_completion_after,
    _items,
    _row,
    _slowest,
    stores,
)


def redis_stall(
    database_url: str | None,
    *,
    jobs: int,
    stalls: int = 1,
    stall: float = 2.5,
    batch: int = 10,
    timeout: float = 120,
) -> Row:
    """``jobs`` enqueued in batches of ``batch`` by a caller whose Redis connection times
    out after 0.5 s, while Redis is stopped ``stalls`` times for ``stall`` seconds."""
    from services.app.bootstrap import bootstrap
    from shared.errors import EnqueueOutcomeUnknown, QueueUnavailable

    with stores(database_url) as (shared, server, _pg, _platform):
        client = redis.Redis.from_url(server.url)
        pid = int(client.info("server")["process_id"])
        caller = Stores(f"{server.url}?socket_timeout=0.5", shared.database_url, shared.namespace)
        platform = bootstrap(settings_for(caller), services=["bench.chaos.workload"])
        requests = mixed_requests(jobs, kinds=("plain", "grouped"))
        workers = Workers(shared)
        started = time.time()
        workers.start()
        misreported = unknown = 0
        stop_faults = threading.Event()

        def stall_redis() -> None:
            for _ in range(stalls):
                if stop_faults.wait(0.2):
                    return
                os.kill(pid, signal.SIGSTOP)
                time.sleep(stall)
                os.kill(pid, signal.SIGCONT)

        stalling = threading.Thread(target=stall_redis, daemon=True)
        stalling.start()
        try:
            pending = [requests[i : i + batch] for i in range(0, len(requests), batch)]
            pace = stalls * (stall + 0.5) / len(pending)
            while pending:
                time.sleep(pace)  # the batches arrive over the stalls, not all before them
                chunk = pending.pop(0)
                try:
                    platform.router.enqueue_many(chunk)
                except EnqueueOutcomeUnknown as exc:
                    unknown += len(exc.unknown)
                    missing = _missing_after_redis_answers(platform, chunk, exc.unknown)
                    if missing:
                        pending.append(missing)
                except QueueUnavailable as exc:
                    taken = set(exc.accepted)
                    refused = [r for i, r in enumerate(chunk) if i not in taken]
                    misreported += len(_recorded(client, shared.namespace, refused))
                    pending.append(refused)
                    time.sleep(0.1)
            stop_faults.set()
            stalling.join()
            wait_for_completion(client, shared.namespace, _items(requests), timeout=timeout)
        finally:
            stop_faults.set()
            os.kill(pid, signal.SIGCONT)
            workers.stop()
            platform.close()
        row = _row(
            "redis_stall",
            client,
            shared.namespace,
            _items(requests),
            f"{stalls} Redis SIGSTOP of {stall:g} s ({unknown} answers unknown, "
            f"{misreported} 'nothing enqueued' that were)",
            started,
            None,
            0,
        )
        row.duplicated += misreported
        return row


def _missing_after_redis_answers(
    platform: Any, chunk: list[Any], unknown: dict[int, str]
) -> list[Any]:
    """The requests of ``chunk`` whose job the store does not hold, once Redis answers
    (what a caller does with an ``enqueue_outcome_unknown``: look the ids up)."""
    while True:
        try:
            return [
                chunk[i]
                for i, job_id in unknown.items()
                if platform.router.broker.jobs.record(job_id) is None
            ]
        except (redis.ConnectionError, redis.TimeoutError):
            time.sleep(0.2)


def _recorded(client: redis.Redis, namespace: str, requests: list[Any]) -> list[Any]:
    """The requests whose job record exists (Redis read once it answers)."""
    while True:
        try:
            pipe = client.pipeline(transaction=False)
            for request in requests:
                pipe.exists(f"{namespace}:job:chaos-{request.params['item']}")
            return [r for r, found in zip(requests, pipe.execute(), strict=True) if found]
        except (redis.ConnectionError, redis.TimeoutError):
            time.sleep(0.2)


def redis_full(
    database_url: str | None, *, jobs: int, batch: int = 20, full: float = 2.0, timeout: float = 120
) -> Row:
    """``jobs`` enqueued in batches of ``batch`` while the Redis is held at ``maxmemory``
    (``noeviction``) for ``full`` seconds with workers running; refused batches are sent
    again afterwards."""
    from shared.errors import QueueFull, QueueUnavailable

    with stores(database_url) as (shared, server, _pg, platform):
        client = redis.Redis.from_url(server.url)
        client.config_set("maxmemory-policy", "noeviction")
        requests = mixed_requests(jobs, kinds=("plain", "grouped"))
        chunks = [requests[i : i + batch] for i in range(0, len(requests), batch)]
        workers = Workers(shared)
        started = time.time()
        workers.start()
        half_taken = not_full = refusals = 0
        refused: list[list[Any]] = []
        try:
            for n, chunk in enumerate(chunks):
                if n == len(chunks) // 3:
                    client.config_set("maxmemory", 1)  # below what it holds: writes refused
                    filled = time.monotonic()
                if n > len(chunks) // 3 and time.monotonic() - filled > full:
                    client.config_set("maxmemory", 0)
                try:
                    platform.router.enqueue_many(chunk)
                except QueueUnavailable as exc:
                    refusals += 1
                    not_full += 0 if isinstance(exc, QueueFull) else 1
                    half_taken += 1 if _recorded(client, shared.namespace, chunk) else 0
                    refused.append(chunk)
                    time.sleep(0.05)
            client.config_set("maxmemory", 0)
            back = time.time()
            for chunk in refused:
                platform.router.enqueue_many(chunk)
            recovery = _first_completion_after(client, shared.namespace, back, _items(requests))
            wait_for_completion(client, shared.namespace, _items(requests), timeout=timeout)
        finally:
            client.config_set("maxmemory", 0)
            workers.stop()
        row = _row(
            "redis_full",
            client,
            shared.namespace,
            _items(requests),
            f"Redis full {full:g} s ({refusals} batches refused, {half_taken} half-taken)",
            started,
            recovery,
            0,
        )
        row.duplicated += half_taken
        row.extra_attempts += not_full
        return row


def evicting_redis(database_url: str | None, *, jobs: int) -> Row:
    """A production process started on an evicting Redis must refuse to."""
    from bench.common import BENCH_CREDENTIALS_KEY
    from shared.config import load_settings
    from shared.redis_persistence import EvictingRedis, verify_redis_persistence

    with stores(database_url) as (_shared, server, _pg, _platform):
        client = redis.Redis.from_url(server.url)
        client.config_set("maxmemory-policy", "allkeys-lru")
        started = time.time()
        # Everything else a production start needs, so the Redis is what is judged
        settings = load_settings(
            redis_url=server.url,
            environment="production",
            connector_credentials_key=BENCH_CREDENTIALS_KEY,
        )
        try:
            verify_redis_persistence(settings)
            refused = False
        except EvictingRedis:
            refused = True
        finally:
            client.config_set("maxmemory-policy", "noeviction")
        return Row(
            scenario="evicting_redis",
            jobs=jobs,
            faults="production start on maxmemory-policy allkeys-lru"
            + (" (refused)" if refused else " (STARTED)"),
            lost=0 if refused else jobs,
            duplicated=0,
            stuck=0,
            extra_attempts=0,
            recovery_s=None,
            seconds=round(time.time() - started, 1),
        )


def postgres_read_only(
    database_url: str | None, *, jobs: int, down: float, timeout: float = 120
) -> Row:
    """The database read-only for ``down`` seconds, its sessions ended (a failover), while
    half the jobs write to it."""
    import psycopg
    from sqlalchemy import text
    from sqlalchemy.engine import make_url

    with stores(database_url) as (shared, server, _pg, platform):
        client = redis.Redis.from_url(server.url)
        url = make_url(shared.database_url)
        name = url.database
        admin_url = url.set(drivername="postgresql", database="postgres").render_as_string(
            hide_password=False
        )
        with platform.engine.begin() as connection:
            connection.execute(text("CREATE TABLE chaos_writes (item text)"))
        requests = mixed_requests(jobs, kinds=("plain", "pg_write"))
        platform.router.enqueue_many(requests)
        workers = Workers(shared)
        started = time.time()
        workers.start()
        try:
            time.sleep(0.5)
            with psycopg.connect(admin_url, autocommit=True) as admin:
                admin.execute(f'ALTER DATABASE "{name}" SET default_transaction_read_only = on')
                admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = %s AND pid <> pg_backend_pid()",
                    (name,),
                )
                time.sleep(down)
                admin.execute(f'ALTER DATABASE "{name}" RESET default_transaction_read_only')
                admin.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = %s AND pid <> pg_backend_pid()",
                    (name,),
                )
            back = time.time()
            recovery = _first_completion_after(client, shared.namespace, back, _items(requests))
            wait_for_completion(client, shared.namespace, _items(requests), timeout=timeout)
        finally:
            workers.stop()
        pipe = client.pipeline(transaction=False)
        for item in _items(requests):
            pipe.hget(f"{shared.namespace}:job:chaos-{item}", "last_delay")
        delayed = sum(1 for d in pipe.execute() if d and d.startswith(b"outage"))
        return _row(
            "postgres_read_only",
            client,
            shared.namespace,
            _items(requests),
            f"database read-only {down:g} s, sessions ended twice ({delayed} jobs delayed)",
            started,
            recovery,
            0,
        )


__all__ = ["evicting_redis", "postgres_read_only", "redis_full", "redis_stall", "tally"]


def connection_kills(
    database_url: str | None, *, jobs: int, kills: int, every: float = 0.3, timeout: float = 120
) -> Row:
    """``jobs`` of the mixed workload drained while every other client connection of the
    Redis is killed ``kills`` times, ``every`` seconds apart."""
    with stores(database_url) as (shared, server, _pg, platform):
        client = redis.Redis.from_url(server.url)
        requests = mixed_requests(jobs)
        enqueue(platform.router, requests)
        workers = Workers(shared)
        started = time.time()
        workers.start()
        recoveries: list[float | None] = []
        killed = 0
        try:
            for _ in range(kills):
                time.sleep(every)
                killed += int(client.client_kill_filter(_type="normal", skipme=True))
                moment = time.time()
                recoveries.append(
                    _first_completion_after(client, shared.namespace, moment, _items(requests))
                )
            wait_for_completion(client, shared.namespace, _items(requests), timeout=timeout)
        finally:
            workers.stop()
        items = _items(requests)
        return _row(
            "connection_kills",
            client,
            shared.namespace,
            items,
            f"{kills} CLIENT KILLs of every worker connection ({killed} connections)",
            started,
            _slowest(recoveries),
            _designed_failures(items),
        )
