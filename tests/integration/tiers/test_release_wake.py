"""A settle that passes its freed group slot to a parked job says so ("released"), and the
settling worker's consumer of that queue fetches at once instead of sleeping out its
backoff: a grouped queue is fed one released job per settle, so an idle consumer's backoff
(up to the poll interval) was a wait added to every slot's cycle."""

from __future__ import annotations

import threading

from router.enqueue import Router
from router.requests import JobRequest
from tests import platform_harness as h
from tiers.broker import TierBroker

QUEUE = "t_serial.fast"


def serial(item: str, sleep: float = 0.0) -> JobRequest:
    return JobRequest(kind="t_serial", organization_id=1, params={"item": item, "sleep": sleep})


def test_a_settle_says_released_when_its_slot_goes_to_a_parked_job(
    router: Router, broker: TierBroker
) -> None:
    # Given two jobs of a group capped at 1: a holds the slot, b is parked
    router.enqueue_many([serial("a"), serial("b")])
    assert h.state(broker, "serial-b") == "parked"
    consumer = broker.consume(QUEUE, prefetch=10, timeout=100)
    first = next(consumer)
    assert first is not None
    # When a's run is settled, its slot goes to b, now waiting in the queue
    assert broker.jobs.settle(first, state="completed", retention_seconds=60) == "released"
    assert h.state(broker, "serial-b") == "waiting"
    # And b's settle frees a slot nobody waits for: "ok"
    second = next(consumer)
    assert second is not None
    assert broker.jobs.settle(second, state="completed", retention_seconds=60) == "ok"
    consumer.close()


def test_a_wake_cuts_short_an_idle_consumers_backoff(broker: TierBroker) -> None:
    # Given a consumer of an empty queue that has missed often: its backoff is about the
    # poll interval, 10 s
    consumer = broker.consume(QUEUE, prefetch=10, timeout=10_000)
    consumer.misses = 30
    returned = threading.Event()
    thread = threading.Thread(target=lambda: (next(consumer), returned.set()), daemon=True)
    thread.start()
    # Then it is still waiting after half a second
    assert not returned.wait(0.5)
    # When a settle of this process pushes to the queue, it returns at once, ready to fetch
    broker.wake(QUEUE)
    assert returned.wait(5.0)
    assert consumer.misses == 0
    thread.join(timeout=5)
    consumer.close()


def test_a_worker_wakes_its_consumer_when_its_settle_releases_a_parked_job(
    router: Router, broker: TierBroker
) -> None:
    woken: list[str] = []
    wake = broker.wake

    def recording(queue_name: str) -> None:
        woken.append(queue_name)
        wake(queue_name)

    broker.wake = recording  # type: ignore[method-assign]
    router.enqueue_many([serial("a", sleep=0.2), serial("b"), serial("c")])
    with h.running_worker(broker):
        h.wait_until(lambda: all(h.state(broker, f"serial-{i}") == "completed" for i in "abc"))
    # a's settle released b, b's released c, c's released nobody
    assert woken == [QUEUE, QUEUE]
