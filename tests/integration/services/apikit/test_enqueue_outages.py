"""What an enqueue answers when Redis stalls or is full: a Redis of the test's own, stopped
with SIGSTOP in the middle of a call, or started with a small ``maxmemory`` under
``noeviction``. Real Redis, the real API app and router."""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from flask.testing import FlaskClient
from pydantic import BaseModel

from services.apikit.enqueue import enqueue_blueprint
from services.app.api import create_app
from tests import platform_harness as h
from tests.fixtures_platform import AUTH, MakePlatform
from tests.fixtures_redis import MakeRedisServer, stop_redis_server
from tiers.families import Family

ROUTE = "/internal/outage_harness/enqueue"


def items(*names: str, padding: int = 0) -> list[dict[str, Any]]:
    return [
        {"kind": "t_plain", "organization_id": 1, "item": name + "x" * padding} for name in names
    ]


def post(client: FlaskClient, body: list[dict[str, Any]]) -> Any:
    return client.post(ROUTE, json={"requests": body}, headers=AUTH)


@pytest.fixture
def own_redis(make_redis_server: MakeRedisServer) -> Iterator[tuple[str, redis.Redis, int]]:
    """A Redis of this test's own: its URL, a client and its process id."""
    url = make_redis_server()
    client = redis.Redis.from_url(url)
    pid = int(client.info("server")["process_id"])
    yield url, client, pid
    os.kill(pid, signal.SIGCONT)  # never leave it stopped for the fixture's teardown
    client.close()


def api(make_platform: MakePlatform, redis_url: str) -> FlaskClient:
    platform = make_platform(redis_url=redis_url, families=h.families().values())
    platform.add_routes(
        lambda: [enqueue_blueprint("outage_harness", "/internal/outage_harness", ["t_plain"], "")]
    )
    return create_app(platform).test_client()


def test_a_redis_that_stalls_after_the_send_answers_outcome_unknown_and_a_retry_is_safe(
    own_redis: tuple[str, redis.Redis, int], make_platform: MakePlatform
) -> None:
    url, client, pid = own_redis
    # Given the API on a Redis that must answer within half a second
    api_client = api(make_platform, f"{url}?socket_timeout=0.5")
    assert post(api_client, items("warm")).status_code == 202
    # When Redis stops (SIGSTOP) with the batch sent to it (for longer than any Redis call
    # the request makes before the enqueue may wait)
    os.kill(pid, signal.SIGSTOP)
    resumed = threading.Timer(2.0, os.kill, (pid, signal.SIGCONT))
    resumed.start()
    response = post(api_client, items("s1", "s2"))
    resumed.join()
    # Then the answer says the outcome is unknown, for both requests, not "nothing enqueued"
    assert response.status_code == 504
    assert response.headers["Retry-After"]
    assert response.json["error"] == "enqueue_outcome_unknown"
    assert [u["index"] for u in response.json["unknown"]] == [0, 1]
    assert response.json["accepted"] == []
    # And both jobs were in fact enqueued once Redis resumed (the answer was right not to
    # say "nothing was enqueued")
    assert client.keys("*:job:plain-s1") and client.keys("*:job:plain-s2")
    # And sending the same requests again is safe: both are deduplicated
    again = post(api_client, items("s1", "s2"))
    assert again.status_code == 202
    assert [job["outcome"] for job in again.json["jobs"]] == ["deduplicated", "deduplicated"]


def test_a_redis_out_of_memory_refuses_the_whole_batch_with_503_and_retry_after(
    own_redis: tuple[str, redis.Redis, int], make_platform: MakePlatform
) -> None:
    url, client, _pid = own_redis
    api_client = api(make_platform, url)
    assert post(api_client, items("warm")).status_code == 202
    # Given a Redis at its maxmemory, under noeviction
    used = int(client.info("memory")["used_memory"])
    client.config_set("maxmemory-policy", "noeviction")
    client.config_set("maxmemory", used + 200_000)
    accepted = 0
    response = None
    for round_ in range(200):
        response = post(api_client, items(*(f"r{round_}-{i}" for i in range(20)), padding=400))
        if response.status_code != 202:
            break
        accepted += 1
    # Then the refusal is a 503 queue_full with Retry-After, never a 500
    assert response is not None
    assert response.status_code == 503, response.json
    assert response.json["error"] == "queue_full"
    assert int(response.headers["Retry-After"]) > 0
    assert response.json["accepted"] == []
    # And the refused batch is all or nothing: none of its jobs is in Redis
    stored = {key.decode().rsplit(":", 1)[-1] for key in client.keys("*:job:plain-r*")}
    assert accepted > 0
    assert not any(job_id.startswith(f"plain-r{accepted}-") for job_id in stored)
    assert len(stored) == 20 * accepted


class TierItem(BaseModel):
    item: str


def _nothing(organization_id: int, item: str) -> None:
    """Never run here: the test only enqueues."""


def tier_families() -> list[Family]:
    return [
        Family(
            name=f"oh_{tier}",
            kind=f"oh_{tier}",
            handler=_nothing,
            params=TierItem,
            job_id=lambda org, p, tier=tier: f"oh-{tier}-{p.item}",
            fixed_tier=tier,
        )
        for tier in ("fast", "slow")
    ]


def test_a_batch_across_two_redis_servers_lists_exactly_what_was_taken(
    make_redis_server: MakeRedisServer, make_platform: MakePlatform
) -> None:
    # Given the fast tier on one Redis and the slow tier on another, which is down
    fast, slow = make_redis_server(), make_redis_server()
    platform = make_platform(
        services=[], families=tier_families(), fast_redis_url=fast, slow_redis_url=slow
    )
    platform.add_routes(
        lambda: [
            enqueue_blueprint("oh", "/internal/oh", ["oh_fast", "oh_slow"], "tiers on two Redis")
        ]
    )
    api_client = create_app(platform).test_client()
    stop_redis_server(slow)
    # When a batch spans both
    body = [
        {"kind": "oh_fast", "organization_id": 1, "item": "a"},
        {"kind": "oh_slow", "organization_id": 1, "item": "b"},
        {"kind": "oh_fast", "organization_id": 1, "item": "c"},
    ]
    response = api_client.post("/internal/oh/enqueue", json={"requests": body}, headers=AUTH)
    # Then the 503 lists the two the fast Redis took, and only those
    assert response.status_code == 503
    assert response.json["error"] == "queue_unavailable"
    assert [(a["index"], a["job_id"]) for a in response.json["accepted"]] == [
        (0, "oh-fast-a"),
        (2, "oh-fast-c"),
    ]
    fast_client = redis.Redis.from_url(fast)
    assert sorted(k.decode().rsplit(":", 1)[-1] for k in fast_client.keys("*:job:*")) == [
        "oh-fast-a",
        "oh-fast-c",
    ]
    fast_client.close()
