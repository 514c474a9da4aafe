"""Test families and real Dramatiq workers for the platform tests.

The families' handlers write what they do to a Redis list (``<ns>:trace``) so a test can
check start and end times, counts and concurrency across processes. Everything here is
importable by spawned worker processes.
"""

from __future__ import annotations

import contextlib
import faulthandler
import json
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import psycopg
import redis
from dramatiq.middleware import CurrentMessage
from pydantic import BaseModel

from shared.cancel_point import cancel_point
from shared.errors import Delay, RecordMissing, Retryable, Unrecoverable
from shared.observability import ACTOR_THROWS
from tiers.broker import TierBroker
from tiers.deliveries import check_delivery
from tiers.families import Family
from tiers.faults import FAULT_ENV
from tiers.options import JOB_ID, WINDOW_ADMITTED
from tiers.policies import RetryPolicy, WindowRule
from tiers.stack import build_broker
from tiers.worker import serve

_STATE: dict[str, Any] = {}


class Params(BaseModel):
    item: str
    mode: str = "ok"
    sleep: float = 0.0
    provider: str | None = None
    times: int = 0
    delay: float = 0.3
    database: str = ""


def _trace(event: str, **fields: Any) -> None:
    client: redis.Redis = _STATE["client"]
    message = CurrentMessage.get_current_message()
    record = {
        "ev": event,
        "t": time.time(),
        "job": message.options[JOB_ID],
        "window": message.options.get(WINDOW_ADMITTED),
        **fields,
    }
    client.rpush(f"{_STATE['ns']}:trace", json.dumps(record))


def handler(
    organization_id: int,
    item: str,
    mode: str,
    sleep: float,
    provider: Any,
    times: int,
    delay: float,
    database: str = "",
):  # type: ignore[no-untyped-def]
    client: redis.Redis = _STATE["client"]
    ns = _STATE["ns"]
    runs = client.incr(f"{ns}:runs:{item}")
    _trace("start", org=organization_id, item=item, run=runs)
    try:
        if sleep:
            time.sleep(sleep)
        if mode == "steps":  # a long job that reaches a cancel point every 50 ms
            for _ in range(times):
                cancel_point()
                time.sleep(0.05)
        if mode == "hang":  # a long job that never reaches a cancel point
            for _ in range(times):
                time.sleep(0.05)
        if mode == "exit":
            os._exit(1)  # the worker process dies mid-run (a native crash, the OOM killer)
        if mode == "fenced":
            # An effect that must not happen twice, committed only while the run holds its
            # delivery.
            check_delivery()
            client.incr(f"{ns}:done:{item}")
        if mode == "missing":
            raise RecordMissing(item)
        if mode == "unrecoverable":
            raise Unrecoverable("provider said 403")
        if mode == "retryable":
            raise Retryable("provider said 503")
        if mode == "crash":
            raise RuntimeError("unexpected")
        if mode == "delay" and runs <= times:
            raise Delay.after(delay, reason="test")
        if mode == "outage" and runs <= times:
            # A real lost connection: nothing listens on port 1.
            psycopg.connect("postgresql://127.0.0.1:1/none", connect_timeout=2)
        if mode == "write":
            # A write to ``database``: refused while it is read-only or a standby.
            with psycopg.connect(database, connect_timeout=2, autocommit=True) as connection:
                connection.execute("CREATE TABLE IF NOT EXISTS harness_writes (item text)")
                connection.execute("INSERT INTO harness_writes VALUES (%s)", (item,))
        if mode == "delay_long":
            raise Delay.after(60, reason="test")
        if mode == "flaky" and runs <= times:
            raise Retryable("flaky")
    finally:
        _trace("end", org=organization_id, item=item, run=runs)


FAST_RETRY = RetryPolicy(max_attempts=3, base_seconds=0.3)
#: Two attempts, each ended by a third consecutive provider delay.
CAPPED_RETRY = RetryPolicy(max_attempts=2, base_seconds=0.3, max_consecutive_delays=2)


def families() -> dict[str, Family]:
    common: dict[str, Any] = {"handler": handler, "params": Params, "retry": FAST_RETRY}
    return {
        f.name: f
        for f in (
            Family(
                name="t_plain",
                kind="t_plain",
                job_id=lambda o, p: f"plain-{p.item}",
                fixed_tier="fast",
                **common,
            ),
            Family(
                name="t_capped",
                kind="t_capped",
                job_id=lambda o, p: f"capped-{p.item}",
                fixed_tier="fast",
                **{**common, "retry": CAPPED_RETRY},
            ),
            Family(
                name="t_group",
                kind="t_group",
                job_id=lambda o, p: f"group-{p.item}",
                fixed_tier="fast",
                group_caps={"fast": 2},
                **common,
            ),
            Family(
                name="t_wide",
                kind="t_wide",
                job_id=lambda o, p: f"wide-{p.item}",
                fixed_tier="fast",
                group_caps={"fast": 8},
                **common,
            ),
            Family(
                name="t_serial",
                kind="t_serial",
                job_id=lambda o, p: f"serial-{p.item}",
                fixed_tier="fast",
                group_caps={"fast": 1},
                **common,
            ),
            Family(
                name="t_window",
                kind="t_window",
                job_id=lambda o, p: f"window-{p.item}",
                provider=lambda p: p.provider,
                fixed_tier="fast",
                window_scope=lambda o, p: f"ods-{o}",
                windows={"*": WindowRule(5, 1.0)},
                **common,
            ),
            Family(
                name="t_paused",
                kind="t_paused",
                job_id=lambda o, p: f"paused-{p.item}",
                fixed_tier="fast",
                pause_flag="pause_api2_test_family",
                **common,
            ),
        )
    }


def make_broker(
    redis_url: str,
    namespace: str,
    *,
    is_enabled: Callable[[str], bool] = lambda name: False,
    windows: Mapping[str, WindowRule] | None = None,
    lease_seconds: float = 30.0,
    heartbeat_timeout_ms: int = 60_000,
    cancel_grace_seconds: float = 30.0,
) -> TierBroker:
    import dramatiq

    fams = families()
    broker, _slots = build_broker(
        redis_url=redis_url,
        namespace=namespace,
        families=fams,
        is_enabled=is_enabled,
        windows=windows,
        lease_seconds=lease_seconds,
        heartbeat_timeout_ms=heartbeat_timeout_ms,
        cancel_grace_seconds=cancel_grace_seconds,
    )
    for family in fams.values():
        dramatiq.Actor(
            family.handler,
            broker=broker,
            actor_name=family.name,
            queue_name=family.queues()[0],
            priority=0,
            options={"throws": ACTOR_THROWS},
        )
    _STATE["client"] = redis.Redis.from_url(redis_url)
    _STATE["ns"] = namespace
    return broker


@contextlib.contextmanager
def serving(
    broker: TierBroker,
    queues: Iterable[str],
    *,
    threads: int = 2,
    drain: float = 5.0,
    poll_ms: int = 50,
) -> Iterator[None]:
    """A real Dramatiq worker (``tiers.worker.serve``) over ``queues``, in a thread of this
    process, for the length of the ``with`` block; it then stops and drains (``drain``
    seconds at most)."""
    stop = threading.Event()
    thread = threading.Thread(
        target=serve,
        args=(broker, list(queues)),
        kwargs={"threads": threads, "stop": stop, "poll_ms": poll_ms, "drain_seconds": drain},
        daemon=True,
    )
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=drain + 15)


@contextlib.contextmanager
def running_worker(
    broker: TierBroker, *, threads: int = 4, drain: float = 5.0, poll_ms: int = 50
) -> Iterator[None]:
    """A real Dramatiq worker over every fast queue, in a thread of this process."""
    queues = [q for f in families().values() for q in f.queues()]
    with serving(broker, queues, threads=threads, drain=drain, poll_ms=poll_ms):
        yield


def _process_main(redis_url: str, namespace: str, threads: int, kwargs: dict[str, Any]) -> None:
    # SIGUSR1 prints every thread's stack to stderr (dump_stacks): what a test that finds
    # the process still running shows.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    broker = make_broker(redis_url, namespace, **kwargs)
    queues = [q for f in families().values() for q in f.queues()]
    serve(broker, queues, threads=threads, poll_ms=50, drain_seconds=5)


def start_worker_process(
    redis_url: str, namespace: str, *, threads: int = 4, fault: str | None = None, **kwargs: Any
) -> multiprocessing.process.BaseProcess:
    """A real Dramatiq worker in its own (spawned) process; SIGTERM drains it. ``fault``
    arms a fault point (``tiers.faults``) in that process only."""
    process = multiprocessing.get_context("spawn").Process(
        target=_process_main, args=(redis_url, namespace, threads, kwargs), daemon=True
    )
    saved = os.environ.get(FAULT_ENV)
    if fault:
        os.environ[FAULT_ENV] = fault
    try:
        process.start()
    finally:
        if saved is None:
            os.environ.pop(FAULT_ENV, None)
        else:
            os.environ[FAULT_ENV] = saved
    return process


def dump_stacks(process: multiprocessing.process.BaseProcess) -> None:
    """Have a worker process of :func:`start_worker_process` print its threads' stacks."""
    if process.pid is not None and process.exitcode is None:
        os.kill(process.pid, signal.SIGUSR1)
        time.sleep(1)


def state(broker: TierBroker, job_id: str) -> str | None:
    record = broker.jobs.record(job_id)
    return record["state"] if record else None


def trace(client: redis.Redis, namespace: str) -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in client.lrange(f"{namespace}:trace", 0, -1)]


def wait_until(
    predicate: Callable[[], bool], timeout: float = 15.0, interval: float = 0.05
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout}s")


def register(platform: Any) -> None:
    """Service-module entry point, so ``bootstrap(services=["tests.platform_harness"])``
    builds a full platform (real flags in PostgreSQL) with the test families."""
    _STATE["client"] = redis.Redis.from_url(platform.settings.redis_url)
    _STATE["ns"] = platform.settings.redis_namespace
    for family in families().values():
        platform.add_family(family)
