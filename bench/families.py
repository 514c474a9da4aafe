"""The benchmark families, their handlers, the platform broker and its worker process.

Like ``tests/platform_harness.py``: everything here is importable by spawned worker processes.
Handlers that the benchmarks time write ``start``/``end`` records to the Redis list
``<namespace>:trace``; the throughput no-op handler does nothing at all.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

import dramatiq
import redis
from dramatiq.middleware import CurrentMessage

from bench.common import connect, tagged_url
from bench.worker_pool import Counters, stop_event_from, wait_for_go
from shared.errors import Delay, Paused, RecordMissing, Unrecoverable
from tiers.broker import TierBroker
from tiers.families import Family
from tiers.middleware.group_slots import FETCHED_AT
from tiers.options import WINDOW_ADMITTED, WINDOW_RESERVATION
from tiers.policies import RetryPolicy, WindowRule
from tiers.stack import build_broker
from tiers.worker import serve

_STATE: dict[str, Any] = {}

#: How long one simulated document sync takes in the throttle storm.
SYNC_SECONDS = 0.25
#: The Notion-style window of the throttle storm, scaled to 4 starts a second.
NOTION_WINDOW = WindowRule(4, 1.0)


#: The families' request models, by reference: worker processes never import them.
NOOP_PARAMS = "bench.family_params:NoopParams"
WORK_PARAMS = "bench.family_params:WorkParams"
SYNC_PARAMS = "bench.family_params:SyncParams"


def _trace(event: str, **fields: Any) -> None:
    client: redis.Redis = _STATE["client"]
    client.rpush(f"{_STATE['ns']}:trace", json.dumps({"ev": event, "t": time.time(), **fields}))


def noop(organization_id: int, item: str) -> None:
    """The throughput benchmark's job: nothing."""


def work(organization_id: int, item: str, sleep: float) -> None:
    """The fairness benchmark's job: sleep, traced; its start says how long the message
    waited in this worker since the fetch that claimed it (None: not known) and which
    process ran it, so a long wait tells whether it was spent in Redis or in a worker."""
    message = CurrentMessage.get_current_message()
    fetched = getattr(message, FETCHED_AT, None)
    _trace(
        "start",
        org=organization_id,
        item=item,
        in_worker=None if fetched is None else time.monotonic() - fetched,
        pid=os.getpid(),
    )
    time.sleep(sleep)
    _trace("end", org=organization_id, item=item)


def burn(organization_id: int, item: str, sleep: float) -> None:
    """``bench.lone_jobs --burn-ms``'s job: ``sleep`` seconds of this thread's CPU, spent in
    Python (the thread's clock, itself a system call, read once every 1,000 steps)."""
    end = time.thread_time() + sleep
    while time.thread_time() < end:
        for _ in range(1_000):
            pass


def sync_document(organization_id: int, document: str, data_source: str) -> None:
    """The throttle storm's job: one provider document sync, traced with the window that
    counted its start (``<window key>#<window index>``) and whether the start was reserved
    in that window by an earlier delay."""
    message = CurrentMessage.get_current_message()
    options = message.options if message is not None else {}
    _trace(
        "start",
        org=organization_id,
        item=document,
        window=options.get(WINDOW_ADMITTED),
        reserved=WINDOW_RESERVATION in options,
    )
    time.sleep(SYNC_SECONDS)
    _trace("end", org=organization_id, item=document)


def families() -> dict[str, Family]:
    return {
        f.name: f
        for f in (
            Family(
                name="b_noop",
                kind="bench_noop",
                handler=noop,
                params=NOOP_PARAMS,
                job_id=lambda o, p: f"noop-{p.item}",
                fixed_tier="fast",
            ),
            Family(
                name="b_fair",
                kind="bench_fair",
                handler=work,
                params=WORK_PARAMS,
                job_id=lambda o, p: f"fair-{o}-{p.item}",
                fixed_tier="fast",
                group_caps={"fast": 2},
            ),
            Family(  # bench.fair_share: a cap that leaves the workers a choice between groups
                name="b_share",
                kind="bench_share",
                handler=work,
                params=WORK_PARAMS,
                job_id=lambda o, p: f"share-{o}-{p.item}",
                fixed_tier="fast",
                group_caps={"fast": 16},
            ),
            Family(  # bench.bullmq_compare: no-op jobs of 20 organizations, 5 at a time each
                name="b_grouped",
                kind="bench_grouped",
                handler=noop,
                params=NOOP_PARAMS,
                job_id=lambda o, p: f"grouped-{o}-{p.item}",
                fixed_tier="fast",
                group_caps={"fast": 5},
            ),
            Family(  # bench.lone_jobs: no-op jobs that arrive one at a time per organization
                name="b_lone",
                kind="bench_lone",
                handler=noop,
                params=NOOP_PARAMS,
                job_id=lambda o, p: f"lone-{o}-{p.item}",
                fixed_tier="fast",
                group_caps={"fast": 1},
            ),
            Family(  # bench.lone_jobs --burn-ms: the same, each job spending CPU
                name="b_burn",
                kind="bench_burn",
                handler=burn,
                params=WORK_PARAMS,
                job_id=lambda o, p: f"burn-{o}-{p.item}",
                fixed_tier="fast",
                group_caps={"fast": 1},
            ),
            Family(
                name="b_sync",
                kind="bench_sync_document",
                handler=sync_document,
                params=SYNC_PARAMS,
                job_id=lambda o, p: f"sync-{o}-{p.document}",
                provider=lambda p: "notion",
                window_scope=lambda o, p: f"{o}:{p.data_source}",
                windows={"notion": NOTION_WINDOW},
                retry=RetryPolicy(max_attempts=3, base_seconds=1.0),
            ),
        )
    }


EXPECTED = (Delay, Paused, RecordMissing, Unrecoverable)


def make_broker(
    redis_url: str,
    namespace: str,
    *,
    counters: Counters | None = None,
    name: str = "tier",
) -> tuple[TierBroker, dict[str, Family]]:
    """The platform broker (``tiers.stack.build_broker``, production defaults) with every
    benchmark family's actor and queues declared as ``services.app.bootstrap`` does."""
    fams = families()
    broker, _slots = build_broker(
        redis_url=tagged_url(redis_url, name),
        namespace=namespace,
        families=fams,
        is_enabled=lambda flag: False,
    )
    if counters is not None:
        broker.add_middleware(counters, before=type(broker.middleware[0]))
    for family in fams.values():
        dramatiq.Actor(
            family.handler,
            broker=broker,
            actor_name=family.name,
            queue_name=family.queues()[0],
            priority=0,
            options={"time_limit": int(family.time_limit_seconds * 1000), "throws": EXPECTED},
        )
        for queue in family.queues():
            broker.declare_queue(queue)
    return broker, fams


def make_router(broker: TierBroker, fams: Mapping[str, Family]) -> Any:
    """The router over the benchmark families (imported here: worker processes, whose memory
    is measured, do not need it)."""
    from router.enqueue import Router
    from router.registry import Registry

    registry = Registry()
    for family in fams.values():
        registry.add(family)
    return Router(registry, broker)


def worker_main(
    slot: int,
    shared: Any,
    go: Any,
    stop: Any,
    redis_url: str,
    namespace: str,
    queues: Sequence[str],
    threads: int,
    prefetch: int,
    poll_ms: int,
) -> None:
    """A platform worker process: ``tiers.worker.serve`` over ``queues``."""
    broker, _fams = make_broker(
        redis_url, namespace, counters=Counters(shared, slot), name=f"tier-worker-{slot}"
    )
    _STATE["client"] = connect(redis_url, f"tier-trace-{slot}")
    _STATE["ns"] = namespace
    stopping = stop_event_from(stop)
    wait_for_go(shared, slot, go)
    if stopping.is_set():
        return
    serve(
        broker,
        queues,
        threads=threads,
        prefetch=prefetch,
        poll_ms=poll_ms,
        drain_seconds=10,
        stop=stopping,
    )
    broker.close()
