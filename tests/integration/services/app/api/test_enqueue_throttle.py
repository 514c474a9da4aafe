"""The failed-authentication throttle on the enqueue routes, which check it in the enqueue's
own Redis call (``services.apikit.auth_throttle``, ``tiers/lua/enqueue.lua``), on the real
Redis: from an address whose window is full a right token gets the same 429 and Retry-After
as a wrong one, whatever its body, and nothing is enqueued; from any other address a valid
enqueue is one round trip that enqueues once; an unreachable Redis leaves authentication
checked."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from flask import Flask
from flask.testing import FlaskClient

from services.apikit.enqueue import enqueue_blueprint
from services.app.api import create_app
from services.app.bootstrap import Platform
from tests import platform_harness as h
from tests.fixtures_platform import AUTH, MakePlatform
from tests.fixtures_redis import MakeRedisServer, stop_redis_server

LIMIT = 3
WRONG = {"Authorization": "Bearer wrong-token"}
ROUTES = ("/internal/jobs/enqueue", "/internal/plain_service/enqueue")
ATTACKER = "203.0.113.21"


def enqueue_platform(make_platform: MakePlatform, **settings: Any) -> Platform:
    """The platform with the harness's ``t_plain`` family (fast tier) and a service route."""
    platform = make_platform(
        families=[h.families()["t_plain"]],
        auth_failure_rate=f"{LIMIT}/60",
        api_max_body_bytes=4096,
        **settings,
    )
    platform.add_routes(
        lambda: [
            enqueue_blueprint("plain_service", "/internal/plain_service", {"t_plain"}, "Plain jobs")
        ]
    )
    return platform


@pytest.fixture
def platform(make_platform: MakePlatform) -> Platform:
    return enqueue_platform(make_platform)


@pytest.fixture
def app(platform: Platform) -> Flask:
    return create_app(platform)


def client_at(app: Flask, address: str) -> FlaskClient:
    client = app.test_client()
    client.environ_base["REMOTE_ADDR"] = address
    return client


def body(*items: str) -> bytes:
    return json.dumps(
        {"requests": [{"kind": "t_plain", "organization_id": 7, "item": i} for i in items]}
    ).encode()


def post(client: FlaskClient, data: bytes, headers: dict[str, str], path: str = ROUTES[0]) -> Any:
    return client.post(path, data=data, headers={**headers, "Content-Type": "application/json"})


def enqueued(client: redis.Redis, namespace: str) -> tuple[int, list[bytes]]:
    """Messages in the t_plain queue, and the job records."""
    return client.llen(f"{namespace}:t_plain.fast"), list(client.scan_iter(f"{namespace}:job:*"))


def throttle(client: FlaskClient) -> None:
    """Fill the client's window with wrong tokens on the enqueue route (each a 401)."""
    for _ in range(LIMIT):
        assert post(client, body("guess"), WRONG).status_code == 401


def answer(response: Any) -> tuple[int, Any, bool]:
    """The status, the body and whether ``Retry-After`` is set, without the countdown (in the
    header and the message), which the clock moves between two requests."""
    body = response.json
    if isinstance(body, dict) and isinstance(body.get("message"), str):
        body = {**body, "message": re.sub(r"\d+ s$", "N s", body["message"])}
    return response.status_code, body, "Retry-After" in response.headers


def assert_same_answer(*responses: Any) -> None:
    """The same answer, and countdowns at most a second apart (whole seconds, rounded up, so
    two requests either side of a second's end differ by one)."""
    assert len({repr(answer(response)) for response in responses}) == 1, [
        answer(response) for response in responses
    ]
    countdowns = [int(response.headers.get("Retry-After", 0)) for response in responses]
    assert max(countdowns) - min(countdowns) <= 1, countdowns


def test_a_throttled_address_gets_the_same_429_for_right_and_wrong_tokens(
    app: Flask, platform: Platform
) -> None:
    # Given an address whose window is full
    attacker = client_at(app, ATTACKER)
    throttle(attacker)
    namespace = platform.settings.redis_namespace
    for path in ROUTES:
        # When it enqueues with a wrong token, and with the right one (one job, then two)
        wrong = post(attacker, body("a"), WRONG, path)
        right = post(attacker, body("a"), AUTH, path)
        batch = post(attacker, body("b", "c"), AUTH, path)
        # Then all three get the same 429, and nothing is enqueued
        assert wrong.status_code == 429, path
        assert_same_answer(right, batch, wrong)
        assert wrong.json["error"] == "too_many_failed_authentications"
        assert 1 <= int(wrong.headers["Retry-After"]) <= 60
    assert enqueued(platform.broker.client, namespace) == (0, [])


@pytest.mark.parametrize(
    "data",
    [b'{"requests": [{"kind": "t_plain"}]}', b"{not json", b'{"requests": []}', b"x" * 5000],
    ids=["invalid", "not-json", "empty", "too-large"],
)
def test_a_throttled_right_token_is_429_whatever_its_body(
    app: Flask, platform: Platform, data: bytes
) -> None:
    attacker = client_at(app, ATTACKER)
    throttle(attacker)
    wrong, right = post(attacker, data, WRONG), post(attacker, data, AUTH)
    assert right.status_code == 429
    assert_same_answer(right, wrong)
    # The same body from an address with room is answered as usual
    assert post(client_at(app, "198.51.100.21"), data, AUTH).status_code in (400, 413)


def test_right_tokens_on_the_enqueue_route_are_not_counted(app: Flask, platform: Platform) -> None:
    caller = client_at(app, "198.51.100.22")
    for index in range(LIMIT * 2):
        assert post(caller, body(f"job-{index}"), AUTH).status_code == 202
    assert post(caller, body("x"), WRONG).status_code == 401  # the first failure: under the limit
    assert enqueued(platform.broker.client, platform.settings.redis_namespace)[0] == LIMIT * 2


class Monitor:
    """The commands clients (not scripts) send to Redis about ``namespace``, from ``MONITOR``,
    until :meth:`stop`."""

    def __init__(self, client: redis.Redis, namespace: str) -> None:
        self.namespace, self.commands = namespace, []
        self._monitor = client.monitor()
        self._stop = f"{namespace}:monitor-stop"
        self._client = client
        self._thread = threading.Thread(target=self._listen, daemon=True)

    def __enter__(self) -> Monitor:
        self._monitor.__enter__()
        self._thread.start()
        return self

    def _listen(self) -> None:
        for event in self._monitor.listen():
            command = event["command"]
            if self._stop in command:
                return
            if self.namespace in command and event.get("client_type") != "lua":
                self.commands.append(command.split(" ", 1)[0].upper())

    def __exit__(self, *exc: object) -> None:
        self._client.exists(self._stop)
        self._thread.join(timeout=10)
        self._monitor.__exit__(*exc)


@pytest.fixture
def monitor(platform: Platform, redis_url: str) -> Iterator[Monitor]:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        yield Monitor(client, platform.settings.redis_namespace)
    finally:
        client.close()


def test_a_valid_enqueue_is_one_round_trip_and_enqueues_once(
    app: Flask, platform: Platform, monitor: Monitor
) -> None:
    caller = client_at(app, "198.51.100.23")
    assert post(caller, body("warm-up"), AUTH).status_code == 202  # loads the script
    with monitor:
        response = post(caller, body("once"), AUTH)
    assert response.status_code == 202
    assert response.json["jobs"][0]["outcome"] == "added"
    assert monitor.commands == ["EVALSHA"]
    namespace = platform.settings.redis_namespace
    queued, records = enqueued(platform.broker.client, namespace)
    assert queued == 2 and sorted(records) == sorted(
        f"{namespace}:job:plain-{item}".encode() for item in ("warm-up", "once")
    )


def test_redis_down_leaves_authentication_checked(
    make_platform: MakePlatform, make_redis_server: MakeRedisServer
) -> None:
    # Given the one Redis the throttle and the queue share, stopped
    url = make_redis_server()
    platform = enqueue_platform(make_platform, redis_url=url)
    client = client_at(create_app(platform), ATTACKER)
    assert post(client, body("before"), AUTH).status_code == 202
    stop_redis_server(url)
    # Then a wrong token is still refused (the throttle fails open: not counted, not 429) and
    # a right one gets the queue's 503, as without the throttle
    assert [post(client, body("a"), WRONG).status_code for _ in range(LIMIT + 1)] == [401] * (
        LIMIT + 1
    )
    refused = post(client, body("a"), AUTH)
    assert (refused.status_code, refused.json["error"]) == (503, "queue_unavailable")


def test_a_tier_on_its_own_redis_is_guarded_by_the_control_redis_window(
    make_platform: MakePlatform, make_redis_server: MakeRedisServer
) -> None:
    # Given the fast tier (t_plain's) on a Redis of its own; failures counted on the control one
    fast_url = make_redis_server()
    platform = enqueue_platform(make_platform, fast_redis_url=fast_url)
    app = create_app(platform)
    fast = redis.Redis.from_url(fast_url)
    namespace = platform.settings.redis_namespace
    try:
        caller = client_at(app, "198.51.100.24")
        assert post(caller, body("open"), AUTH).status_code == 202
        attacker = client_at(app, ATTACKER)
        throttle(attacker)
        assert_same_answer(post(attacker, body("b"), AUTH), post(attacker, body("b"), WRONG))
        assert post(attacker, body("b"), AUTH).status_code == 429
        assert enqueued(fast, namespace) == (1, [f"{namespace}:job:plain-open".encode()])
    finally:
        fast.close()


def test_the_control_redis_down_leaves_a_tier_on_its_own_redis_enqueuing(
    make_platform: MakePlatform, make_redis_server: MakeRedisServer
) -> None:
    # Given the fast tier on a Redis of its own, and the control Redis (the throttle's) stopped
    control_url, fast_url = make_redis_server(), make_redis_server()
    platform = enqueue_platform(make_platform, redis_url=control_url, fast_redis_url=fast_url)
    client = client_at(create_app(platform), ATTACKER)
    stop_redis_server(control_url)
    # Then the window, unreadable, lets a right token through (fails open) and a wrong one
    # is still refused
    assert post(client, body("a"), AUTH).status_code == 202
    assert post(client, body("a"), WRONG).status_code == 401


def test_a_full_redis_refuses_a_throttled_right_token_with_the_same_429(
    make_platform: MakePlatform, make_redis_server: MakeRedisServer
) -> None:
    # Given an address whose window is full, then a Redis out of memory (it refuses writes)
    url = make_redis_server()
    platform = enqueue_platform(make_platform, redis_url=url)
    app = create_app(platform)
    attacker = client_at(app, ATTACKER)
    throttle(attacker)
    server = redis.Redis.from_url(url)
    server.config_set("maxmemory-policy", "noeviction")
    server.config_set("maxmemory", 1)
    try:
        # Then a right token is answered as a wrong one, and a caller with room gets 503
        assert_same_answer(post(attacker, body("a"), AUTH), post(attacker, body("a"), WRONG))
        assert post(attacker, body("a"), AUTH).status_code == 429
        full = post(client_at(app, "198.51.100.25"), body("a"), AUTH)
        assert (full.status_code, full.json["error"]) == (503, "queue_full")
    finally:
        server.config_set("maxmemory", 0)
        server.close()
