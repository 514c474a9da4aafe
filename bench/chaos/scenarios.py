"""The chaos scenarios. Each runs real worker processes against a Redis of its own (AOF,
``appendfsync everysec``) and a PostgreSQL, injects its faults while jobs run, waits for the
work to finish and returns one row of the report.

=====================  =====================================================================
scenario               fault
=====================  =====================================================================
``worker_kills``       random worker SIGKILLs (each replaced) while a mixed workload arrives
``redis_restarts``     Redis SIGKILLed and started again, several times, mid-run
``postgres_outage``    PostgreSQL stopped for a while mid-run (kill switches and handlers
                       read it)
``malformed``          adjacent pairs of undecodable messages at the head of the queue
``dead_child``         a child of ``speedtier worker --processes 2``'s pool SIGKILLed
=====================  =====================================================================

Row fields: ``lost`` (not completed and nothing will run it), ``duplicated`` (a job completed
twice: a finished job brought back), ``stuck`` (not completed, record still live at the end),
``extra_attempts`` (attempts spent beyond the workload's own designed failures),
``recovery_s`` (from the fault's end to the next completion), ``late`` (work that came back
after its bound). The faults of a stalled, poisoned or dead worker and of a message with a
mismatched id are in ``bench.chaos.worker_faults``.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import random
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

import redis

from bench.chaos.cluster import (
    POLL_MS,
    Stores,
    Workers,
    completions_after,
    enqueue,
    malformed_burst,
    mixed_requests,
    settings_for,
    tally,
    wait_for_completion,
)
from bench.chaos.servers import DurableRedis, OwnPostgres
from bench.chaos.workload import ledger_key
from bench.common import process_stats


@dataclass
class Row:
    scenario: str
    jobs: int
    faults: str
    lost: int
    duplicated: int
    stuck: int
    extra_attempts: int
    recovery_s: float | None
    seconds: float
    #: Returns past their bound (a dead worker's jobs: the heartbeat timeout and a poll).
    late: int = 0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@contextlib.contextmanager
def stores(server_url: str | None = None, *, own_postgres: bool = False) -> Iterator[Any]:
    """A durable Redis of the suite's own and a fresh migrated database (on ``server_url``'s
    PostgreSQL, or on one of the suite's own), both removed afterwards; yields
    ``(stores, redis server, postgres server or None, platform)``."""
    from services.app.bootstrap import bootstrap
    from shared.db.migrate import upgrade

    server = DurableRedis()
    server.start()
    postgres = OwnPostgres() if own_postgres or not server_url else None
    database_url = ""
    try:
        if postgres is not None:
            postgres.start()
            database_url = postgres.url
        else:
            assert server_url
            database_url = _create_database(server_url)
        upgrade(database_url)
        shared = Stores(server.url, database_url, f"chaos{random.randrange(10**6)}")
        platform = bootstrap(settings_for(shared), services=["bench.chaos.workload"])
        try:
            yield shared, server, postgres, platform
        finally:
            platform.close()
    finally:
        if postgres is not None:
            postgres.remove()
        elif database_url and server_url:
            _drop_database(server_url, database_url)
        server.stop()


def _admin(server_url: str) -> Any:
    import psycopg

    return psycopg.connect(server_url, autocommit=True, connect_timeout=10)


def _create_database(server_url: str) -> str:
    from sqlalchemy.engine import make_url

    name = f"speedtier_chaos_{random.randrange(16**8):08x}"
    with _admin(server_url) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    url = make_url(server_url).set(database=name)
    return url.render_as_string(hide_password=False)


def _drop_database(server_url: str, database_url: str) -> None:
    from sqlalchemy.engine import make_url

    name = make_url(database_url).database
    with _admin(server_url) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _row(
    scenario: str,
    client: redis.Redis,
    ns: str,
    items: list[str],
    faults: str,
    started: float,
    recovery: float | None,
    designed_failures: int,
) -> Row:
    result = tally(client, ns, items)
    return Row(
        scenario=scenario,
        jobs=result.jobs,
        faults=faults,
        lost=result.lost,
        duplicated=result.duplicated,
        stuck=result.stuck,
        extra_attempts=max(0, result.failures - designed_failures),
        recovery_s=None if recovery is None else round(recovery, 2),
        seconds=round(time.time() - started, 1),
    )


def _designed_failures(items: list[str]) -> int:
    """The workload's own failures: each ``retrying`` job spends one attempt on purpose."""
    return sum(1 for item in items if item.startswith("retrying-"))


def worker_kills(
    database_url: str | None, *, jobs: int, kills: int, interval: float = 0.25, timeout: float = 180
) -> Row:
    """``kills`` random SIGKILLs, one per ``interval``, while ``jobs`` arrive in waves."""
    rng = random.Random(7)
    with stores(database_url) as (shared, server, _pg, platform):
        client = redis.Redis.from_url(server.url)
        workers = Workers(shared)
        started = time.time()
        workers.start()
        requests = mixed_requests(jobs)
        wave = max(1, jobs // kills)
        try:
            for k in range(kills):
                enqueue(platform.router, requests[k * wave : (k + 1) * wave])
                time.sleep(interval)
                workers.kill_one(rng)
            enqueue(platform.router, requests[kills * wave :])
            wait_for_completion(client, shared.namespace, _items(requests), timeout=timeout)
        finally:
            workers.stop()
        items = _items(requests)
        return _row(
            "worker_kills",
            client,
            shared.namespace,
            items,
            f"{workers.kills} worker SIGKILLs",
            started,
            None,
            _designed_failures(items),
        )


def redis_restarts(
    database_url: str | None,
    *,
    jobs: int,
    restarts: int = 3,
    down: float = 1.5,
    every: float = 3.0,
    timeout: float = 180,
) -> Row:
    """Redis SIGKILLed and restarted ``restarts`` times while the workers run a mixed
    workload, each time down for ``down`` seconds. A kill comes ``every`` seconds after the
    previous restart, or sooner, once the ``n``-th of ``2 (restarts + 1)`` shares of the
    jobs is done: fast workers must not finish before the fault (nothing would be left to
    recover, and the recovery would wait out its minute)."""
    with stores(database_url) as (shared, server, _pg, platform):
        client = redis.Redis.from_url(server.url)
        requests = mixed_requests(jobs)
        enqueue(platform.router, requests)
        workers = Workers(shared)
        started = time.time()
        workers.start()
        recoveries: list[float | None] = []
        try:
            for n in range(1, restarts + 1):
                _until_done(client, shared.namespace, jobs * n // (2 * (restarts + 1)), every)
                server.kill()
                time.sleep(down)
                server.start()
                back = time.time()
                recoveries.append(
                    _first_completion_after(client, shared.namespace, back, _items(requests))
                )
            wait_for_completion(client, shared.namespace, _items(requests), timeout=timeout)
        finally:
            workers.stop()
        items = _items(requests)
        return _row(
            "redis_restarts",
            client,
            shared.namespace,
            items,
            f"{restarts} Redis SIGKILL + restart ({down:g} s down)",
            started,
            _slowest(recoveries),
            _designed_failures(items),
        )


def postgres_outage(*, jobs: int, down: float, timeout: float = 240) -> Row:
    """PostgreSQL stopped for ``down`` seconds while every job reads it (kill switch) and a
    fifth of them query it in the handler."""
    with stores(None, own_postgres=True) as (shared, server, postgres, platform):
        client = redis.Redis.from_url(server.url)
        requests = mixed_requests(jobs)
        enqueue(platform.router, requests)
        workers = Workers(shared)
        started = time.time()
        workers.start()
        try:
            time.sleep(1.0)
            postgres.stop()
            time.sleep(down)
            postgres.start()
            back = time.time()
            recovery = _first_completion_after(client, shared.namespace, back, _items(requests))
            wait_for_completion(client, shared.namespace, _items(requests), timeout=timeout)
        finally:
            workers.stop()
        items = _items(requests)
        return _row(
            "postgres_outage",
            client,
            shared.namespace,
            items,
            f"PostgreSQL stopped {down:g} s",
            started,
            recovery,
            _designed_failures(items),
        )


def malformed(database_url: str | None, *, jobs: int, pairs: int, timeout: float = 120) -> Row:
    """``pairs`` adjacent pairs of undecodable messages ahead of ``jobs`` good ones."""
    with stores(database_url) as (shared, server, _pg, platform):
        client = redis.Redis.from_url(server.url)
        requests = mixed_requests(jobs, kinds=("plain",))
        enqueue(platform.router, requests)
        bad = malformed_burst(client, shared.namespace, "chaos_plain.fast", pairs)
        workers = Workers(shared)
        started = time.time()
        workers.start()
        try:
            wait_for_completion(client, shared.namespace, _items(requests), timeout=timeout)
        finally:
            workers.stop()
        dead = client.zcard(f"{shared.namespace}:chaos_plain.fast.XQ")
        row = _row(
            "malformed",
            client,
            shared.namespace,
            _items(requests),
            f"{bad} malformed messages ({dead} dead-lettered)",
            started,
            None,
            0,
        )
        row.lost += bad - dead  # a malformed message not dead-lettered comes back forever
        return row


def dead_child(database_url: str | None, *, jobs: int, timeout: float = 120) -> Row:
    """A pool of two worker children (the pool behind ``speedtier worker --processes 2``);
    one child SIGKILLed mid-run must be replaced and its work finished."""
    with stores(database_url) as (shared, server, _pg, platform):
        client = redis.Redis.from_url(server.url)
        requests = mixed_requests(jobs)
        pool = multiprocessing.get_context("spawn").Process(target=_pool_main, args=(shared,))
        started = time.time()
        pool.start()
        try:
            assert pool.pid is not None
            pool_pid = pool.pid
            children = _wait_for(
                lambda: _children(pool_pid) if len(_children(pool_pid)) == 2 else None
            )
            enqueue(platform.router, requests)
            time.sleep(1.0)
            victim = children[0]
            os.kill(victim, signal.SIGKILL)
            killed = time.time()
            replaced = _wait_for(
                lambda: time.time() if len(set(_children(pool_pid)) - {victim}) == 2 else None
            )
            wait_for_completion(client, shared.namespace, _items(requests), timeout=timeout)
        finally:
            if pool.pid is not None:
                os.kill(pool.pid, signal.SIGTERM)
            pool.join(timeout=30)
        items = _items(requests)
        return _row(
            "dead_child",
            client,
            shared.namespace,
            items,
            "1 pool child SIGKILLed (replaced)",
            started,
            replaced - killed,
            _designed_failures(items),
        )


def _pool_main(shared: Stores) -> None:
    from bench.chaos.cluster import worker_main
    from services.app.worker_pool import WorkerPool

    raise SystemExit(WorkerPool(worker_main, (shared, 8), size=2, name="chaos").run())


def _children(pid: int) -> list[int]:
    return sorted(
        child for child, fields in process_stats() if int(fields[1]) == pid and fields[0] != "Z"
    )


def _wait_for(probe: Callable[[], Any], timeout: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = probe()
        if value:
            return value
        time.sleep(0.05)
    raise TimeoutError("condition not met")


def _until_done(client: redis.Redis, namespace: str, count: int, seconds: float) -> None:
    """Wait until ``count`` completions are in the ledger, ``seconds`` at the most."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and client.llen(ledger_key(namespace, "done")) < count:
        time.sleep(POLL_MS / 1000 / 4)


def _first_completion_after(
    client: redis.Redis, namespace: str, moment: float, items: list[str]
) -> float | None:
    """Seconds from ``moment`` to the first job completed after it (waits up to 60 s); None
    when every job of ``items`` had completed by then (nothing was left to recover)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with contextlib.suppress(redis.ConnectionError):
            after = completions_after(client, namespace, moment)
            if after:
                return after[0] - moment
            if tally(client, namespace, items).completed == len(items):
                return None
        time.sleep(POLL_MS / 1000 / 4)
    return float("inf")


def _slowest(recoveries: list[float | None]) -> float | None:
    """The longest of the measured recoveries (None: none measured)."""
    measured = [r for r in recoveries if r is not None]
    return max(measured) if measured else None


def _items(requests: list[Any]) -> list[str]:
    return [request.params["item"] for request in requests]
