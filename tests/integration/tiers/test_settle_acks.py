"""An ack or nack that meets a lost connection in the settle sender holds no other settle,
and is still done when the worker drains. Real Redis and a real worker; the lost
connection is injected into one nack (Dramatiq's own tests do the same: a consumer whose
nack raises ``ConnectionClosed``)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from dramatiq.errors import ConnectionClosed

from router.enqueue import Router
from router.requests import JobRequest
from tests import platform_harness as h
from tiers.broker import TierBroker
from tiers.consumer import TierConsumer
from tiers.dead_letters import DeadLetters
from tiers.options import JOB_ID

QUEUE = "t_plain.fast"


def request(item: str, **params: object) -> JobRequest:
    return JobRequest(kind="t_plain", organization_id=1, params={"item": item, **params})


class NackOutage:
    """Nacks of ``job_id`` raise ConnectionClosed until :meth:`end` (the failed tries are
    counted)."""

    def __init__(self, job_id: str) -> None:
        self.job_id = job_id
        self.over = threading.Event()
        self.failed_tries = 0

    def end(self) -> None:
        self.over.set()


@pytest.fixture
def nack_outage(monkeypatch: pytest.MonkeyPatch) -> Iterator[NackOutage]:
    outage = NackOutage("plain-bad")
    nack = TierConsumer.nack

    def failing_nack(self: TierConsumer, message: Any) -> None:
        if message.options[JOB_ID] == outage.job_id and not outage.over.is_set():
            outage.failed_tries += 1
            raise ConnectionClosed(redis.ConnectionError("connection lost during the nack"))  # type: ignore[no-untyped-call]
        nack(self, message)

    monkeypatch.setattr(TierConsumer, "nack", failing_nack)
    yield outage
    outage.end()


def test_a_nack_retried_after_a_lost_connection_holds_no_other_settle(
    router: Router, broker: TierBroker, nack_outage: NackOutage
) -> None:
    letters = DeadLetters(broker.jobs)
    items = [f"q{i}" for i in range(50)]
    with h.running_worker(broker, threads=2):
        # Given a failed job whose nack keeps meeting a lost connection
        router.enqueue(request("bad", mode="unrecoverable"))
        h.wait_until(lambda: nack_outage.failed_tries > 0)
        # When 50 quick jobs run meanwhile
        router.enqueue_many([request(item) for item in items])
        # Then they all settle (before: the settle sender slept 5 s per failed try, and
        # every settle behind it waited)
        h.wait_until(lambda: all(h.state(broker, f"plain-{i}") == "completed" for i in items))
        assert letters.counts([QUEUE]) == {QUEUE: 0}
        # And once the connection is back, the nack lands: the message is dead-lettered
        nack_outage.end()
        h.wait_until(lambda: letters.counts([QUEUE]) == {QUEUE: 1})


def test_settles_behind_a_failing_nack_land_when_the_worker_drains(
    router: Router,
    broker: TierBroker,
    redis_client: redis.Redis,
    namespace: str,
    nack_outage: NackOutage,
) -> None:
    letters = DeadLetters(broker.jobs)
    items = ["d0", "d1"]
    with h.running_worker(broker, threads=2, drain=3):
        # Given a failed job whose nack meets a lost connection
        router.enqueue(request("bad", mode="unrecoverable"))
        h.wait_until(lambda: nack_outage.failed_tries > 0)
        # And jobs, one per worker thread, that finish during the drain
        router.enqueue_many([request(item, sleep=0.3) for item in items])
        h.wait_until(lambda: all(redis_client.get(f"{namespace}:runs:{i}") for i in items))
        # When the worker is told to stop, and the connection comes back a second later
        threading.Timer(1.0, nack_outage.end).start()
    # Then their settles landed within the drain (before: queued behind the nack's 5 s
    # retry in the settle sender, past the drain period), and so did the nack
    assert [h.state(broker, f"plain-{item}") for item in items] == ["completed"] * 2
    assert letters.counts([QUEUE]) == {QUEUE: 1}
