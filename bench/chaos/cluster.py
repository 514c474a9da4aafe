"""Worker processes for the chaos suite: start, SIGKILL and replace them, and the ledger
reads that say what became of every job."""

from __future__ import annotations

import logging
import multiprocessing
import os
import random
import signal
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from multiprocessing.process import BaseProcess
from typing import Any

import redis

from bench.chaos.workload import DESIGNED_FAILURE, KINDS, family_of, ledger_key

LIVE = {b"waiting", b"parked", b"delayed", b"active"}
#: Worker settings: short heartbeats and leases so a killed worker's work returns quickly.
WORKER_SETTINGS: dict[str, Any] = {
    "environment": "test",
    "egress_allowed_networks": "127.0.0.1/32",  # the fakes listen on loopback
    "heartbeat_timeout_seconds": 2.0,
    "group_lease_seconds": 3.0,
    "flag_cache_seconds": 0.5,
    "worker_poll_ms": 100,
    "log_level": "WARNING",
}
POLL_MS = WORKER_SETTINGS["worker_poll_ms"]


@dataclass(frozen=True)
class Stores:
    redis_url: str
    database_url: str
    namespace: str


def settings_for(stores: Stores) -> Any:
    from shared.config import load_settings

    return load_settings(
        redis_url=stores.redis_url,
        database_url=stores.database_url,
        redis_namespace=stores.namespace,
        **WORKER_SETTINGS,
    )


class _DesignedFailures(logging.Filter):
    """Drops Dramatiq's traceback for the workload's own ``retrying`` failures (one per
    ``retrying`` job, by design); every other error is still printed."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        return not (error is not None and str(error).startswith(DESIGNED_FAILURE))


def worker_main(stores: Stores, threads: int) -> None:
    """One worker process over the chaos families (run in a spawned child)."""
    from services.app.bootstrap import bootstrap
    from tiers.worker import serve

    logging.getLogger("dramatiq.worker.WorkerThread").addFilter(_DesignedFailures())

    # Dramatiq's default maintenance chance: a dead worker's messages return on the
    # dead-worker check's schedule, as in production, not at a frequent draw.
    platform = bootstrap(settings_for(stores), services=["bench.chaos.workload"])
    serve(
        platform.broker,
        platform.registry.queues_of_tier("fast"),
        threads=threads,
        poll_ms=POLL_MS,
        drain_seconds=5,
    )


@dataclass
class Workers:
    """``count`` worker processes, kept at ``count`` by :meth:`kill_one`."""

    stores: Stores
    count: int = 2
    threads: int = 8
    processes: list[BaseProcess] = field(default_factory=list)
    kills: int = 0

    def _spawn(self) -> BaseProcess:
        process = multiprocessing.get_context("spawn").Process(
            target=worker_main, args=(self.stores, self.threads), daemon=True
        )
        process.start()
        return process

    def start(self) -> None:
        self.processes = [self._spawn() for _ in range(self.count)]

    def kill_one(self, rng: random.Random) -> None:
        """SIGKILL a random worker and start its replacement."""
        victim = self.processes.pop(rng.randrange(len(self.processes)))
        if victim.pid is not None:
            os.kill(victim.pid, signal.SIGKILL)
        victim.join(timeout=10)
        self.kills += 1
        self.processes.append(self._spawn())

    def stop(self) -> None:
        for process in self.processes:
            if process.is_alive() and process.pid is not None:
                os.kill(process.pid, signal.SIGTERM)
        for process in self.processes:
            process.join(timeout=15)
            if process.is_alive():
                process.kill()
        self.processes = []


def mixed_requests(
    count: int, *, organizations: int = 20, kinds: Sequence[str] = KINDS, start: int = 0
) -> list[Any]:
    """``count`` requests cycling through ``kinds`` and ``organizations``."""
    from router.requests import JobRequest

    requests = []
    for n in range(start, start + count):
        kind = kinds[n % len(kinds)]
        requests.append(
            JobRequest(
                family_of(kind), 1 + n % organizations, {"item": f"{kind}-{n}", "kind": kind}
            )
        )
    return requests


def enqueue(router: Any, requests: Sequence[Any]) -> None:
    for start in range(0, len(requests), 500):
        router.enqueue_many(list(requests[start : start + 500]))


@dataclass
class Tally:
    """What became of the jobs, read from their records and the ledger."""

    jobs: int
    completed: int
    stuck: int  # not completed, record still live (waiting, parked, delayed, active)
    lost: int  # not completed and nothing will run it: finished otherwise, or no record
    duplicated: int  # completed (or its effect committed) more than once
    failures: int  # attempts spent (Retryable / crashes), from the records
    states: dict[str, int]


def tally(client: redis.Redis, namespace: str, items: Iterable[str]) -> Tally:
    items = list(items)
    pipe = client.pipeline(transaction=False)
    for item in items:
        pipe.hmget(f"{namespace}:job:chaos-{item}", "state", "failures")
    records = pipe.execute()
    settled = client.hgetall(ledger_key(namespace, "settled"))
    effects = client.hgetall(ledger_key(namespace, "effects"))
    states: Counter[str] = Counter()
    stuck = lost = failures = 0
    for state, failed in records:
        states[state.decode() if state else "missing"] += 1
        failures += int(failed or 0)
        if state == b"completed":
            continue
        if state in LIVE:
            stuck += 1
        else:
            lost += 1
    duplicated = sum(
        1
        for item in items
        if int(settled.get(item.encode(), 0)) > 1 or int(effects.get(item.encode(), 0)) > 1
    )
    return Tally(
        jobs=len(items),
        completed=states["completed"],
        stuck=stuck,
        lost=lost,
        duplicated=duplicated,
        failures=failures,
        states=dict(states),
    )


def wait_for_completion(
    client: redis.Redis, namespace: str, items: Sequence[str], *, timeout: float
) -> float:
    """Wait until every job completed (or ``timeout``); return when the last one did."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        done = tally(client, namespace, items)
        if done.completed == len(items):
            break
        time.sleep(0.25)
    return time.time()


def completions_after(client: redis.Redis, namespace: str, moment: float) -> list[float]:
    """Completion times (epoch seconds) after ``moment``, sorted."""
    raw = client.lrange(ledger_key(namespace, "done"), 0, -1)
    return sorted(t for t in (float(x) for x in raw) if t > moment)


def malformed_burst(client: redis.Redis, namespace: str, queue: str, pairs: int) -> int:
    """Push ``pairs`` adjacent pairs of undecodable messages to the head of ``queue``."""
    key = f"{namespace}:{queue}"
    for n in range(pairs):
        for half in ("a", "b"):
            redis_id = f"malformed-{n}-{half}"
            client.hset(f"{key}.msgs", redis_id, b'{"actor_name": "chaos_plain", "args": [')
            client.lpush(key, redis_id)
    return 2 * pairs
