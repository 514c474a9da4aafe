"""A worker process tunes its garbage collector before it starts (``tiers.gc_tuning``): what
start-up made is frozen and young collections come every 10,000 allocations; a worker served
in a thread of another process (the tests' own) leaves that process's collector alone."""

from __future__ import annotations

import gc
import json
import multiprocessing
import subprocess
import sys
import threading
from typing import Any

from tests import platform_harness as h
from tiers.broker import TierBroker
from tiers.gc_tuning import YOUNG_THRESHOLD

PROBE = """
import gc, json
from tiers.gc_tuning import tune_worker_collector

class Node:
    pass

def cycle():
    a, b = Node(), Node()
    a.other, b.other = b, a
    return a

kept = cycle()                      # alive at start-up: frozen
before = gc.get_threshold()
tune_worker_collector()
frozen = gc.get_freeze_count()
later = cycle()                     # made afterwards: still collectable
del later
found = gc.collect()
print(json.dumps({"before": before, "after": gc.get_threshold(), "frozen": frozen,
                  "collected": found}))
"""


def test_the_collector_freezes_start_up_and_still_collects_later_cycles() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROBE], capture_output=True, text=True, check=True, timeout=60
    )
    seen = json.loads(done.stdout)
    assert seen["before"][0] == 700  # CPython's default
    assert seen["after"] == [YOUNG_THRESHOLD, seen["before"][1], seen["before"][2]]
    # start-up's objects (the modules imported, this probe's own) went to the permanent
    # generation
    assert seen["frozen"] > 1_000
    # a cycle dropped after the freeze is found by the next collection (its two objects and
    # their attribute dictionaries, at least)
    assert seen["collected"] >= 2


def _serve_and_report(redis_url: str, namespace: str, out: Any) -> None:
    from tiers.worker import serve

    broker = h.make_broker(redis_url, namespace)
    queues = [q for f in h.families().values() for q in f.queues()]
    stop = threading.Event()
    threading.Timer(1.0, stop.set).start()
    serve(broker, queues, threads=2, poll_ms=50, drain_seconds=2, stop=stop)
    out.put((gc.get_freeze_count(), gc.get_threshold()[0]))


def test_a_worker_process_is_tuned_and_a_worker_thread_leaves_its_process_alone(
    broker: TierBroker, redis_url: str, namespace: str
) -> None:
    # A worker served in a thread of this (test) process: the process's collector is as it was
    frozen, threshold = gc.get_freeze_count(), gc.get_threshold()
    with h.running_worker(broker, drain=2):
        pass
    # (no freeze: the permanent generation did not grow; it may shrink as objects in it die)
    assert gc.get_freeze_count() <= frozen
    assert gc.get_threshold() == threshold

    # A worker process (serve in its main thread): tuned before it started
    context = multiprocessing.get_context("spawn")
    out = context.Queue()
    process = context.Process(target=_serve_and_report, args=(redis_url, namespace, out))
    process.start()
    try:
        frozen_there, young_there = out.get(timeout=60)
    finally:
        process.join(timeout=30)
    assert frozen_there > 10_000 and young_there == YOUNG_THRESHOLD
