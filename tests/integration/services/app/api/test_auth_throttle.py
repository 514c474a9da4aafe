"""Failed authentication rate-limited per source address (``services.apikit.auth_throttle``),
on the real Redis: past ``SPEEDTIER_AUTH_FAILURE_RATE`` failures, every credential from that
address is answered 429 with Retry-After, unchecked; other addresses and requests without a
credential are not affected."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from flask import Flask
from flask.testing import FlaskClient

from services.apikit.auth_throttle import AuthThrottle, install_auth_throttle
from services.app.api import create_app
from services.app.bootstrap import Platform
from services.ingestion import store
from tests.fixtures_platform import AUTH, TOKEN, MakePlatform
from tiers.policies import WindowRule
from tiers.rate_window import RateWindows

LIMIT = 3
WRONG = {"Authorization": "Bearer wrong-token"}


@pytest.fixture
def platform(make_platform: MakePlatform) -> Platform:
    return make_platform(auth_failure_rate=f"{LIMIT}/60")


@pytest.fixture
def app(platform: Platform) -> Flask:
    return create_app(platform)


def client_at(app: Flask, address: str) -> FlaskClient:
    client = app.test_client()
    client.environ_base["REMOTE_ADDR"] = address
    return client


def statuses(client: FlaskClient, path: str, headers: dict[str, str], times: int) -> list[int]:
    return [client.get(path, headers=headers).status_code for _ in range(times)]


def assert_throttled(response: Any) -> None:
    assert response.status_code == 429
    assert response.json["error"] == "too_many_failed_authentications"
    assert 1 <= int(response.headers["Retry-After"]) <= 60


def test_wrong_internal_tokens_are_answered_429_past_the_limit(app: Flask) -> None:
    # Given an address that sent LIMIT wrong tokens (each answered 401)
    attacker = client_at(app, "203.0.113.7")
    assert statuses(attacker, "/internal/openapi.json", WRONG, LIMIT) == [401] * LIMIT
    # When it sends another, or the right one
    assert_throttled(attacker.get("/internal/openapi.json", headers=WRONG))
    assert_throttled(attacker.get("/internal/openapi.json", headers=AUTH))
    # Then a request without a credential is not a guess: 401 as ever, and health answers
    assert attacker.get("/internal/openapi.json").status_code == 401
    assert attacker.get("/healthz").status_code == 200
    # And another address is not affected
    caller = client_at(app, "198.51.100.2")
    assert caller.get("/internal/openapi.json", headers=AUTH).status_code == 200
    assert caller.get("/internal/openapi.json", headers=WRONG).status_code == 401


def test_right_tokens_are_not_counted(app: Flask) -> None:
    caller = client_at(app, "198.51.100.3")
    assert statuses(caller, "/internal/openapi.json", AUTH, LIMIT * 3) == [200] * (LIMIT * 3)
    assert caller.get("/internal/openapi.json", headers=WRONG).status_code == 401


def test_unknown_api_keys_are_counted_too(app: Flask, platform: Platform) -> None:
    with platform.sessions() as session:
        _, key = store.create_api_key(session, organization_id=4242, name="k")
        session.commit()
    attacker = client_at(app, "203.0.113.8")
    unknown = {"Authorization": "Bearer sk-not-a-key"}
    assert statuses(attacker, "/knowledge-bases", unknown, LIMIT) == [401] * LIMIT
    assert_throttled(attacker.get("/knowledge-bases", headers=unknown))
    assert_throttled(attacker.get("/knowledge-bases", headers={"Authorization": f"Bearer {key}"}))
    assert (
        client_at(app, "198.51.100.4")
        .get("/knowledge-bases", headers={"Authorization": f"Bearer {key}"})
        .status_code
        == 200
    )


def test_failed_dashboard_sign_ins_are_counted(app: Flask) -> None:
    attacker = client_at(app, "203.0.113.9")
    for _ in range(LIMIT):
        answer = attacker.post("/dashboard/login", data={"name": "eve", "token": "guess"})
        assert answer.status_code == 401
    # the right token is not even looked at now (the form answers with its page, not JSON)
    refused = attacker.post("/dashboard/login", data={"name": "eve", "token": TOKEN})
    assert refused.status_code == 429 and b"Too many failed sign-ins" in refused.data
    assert 1 <= int(refused.headers["Retry-After"]) <= 60
    assert_throttled(attacker.get("/dashboard/", headers=AUTH))
    operator = client_at(app, "198.51.100.5")
    answer = operator.post("/dashboard/login", data={"name": "ann", "token": TOKEN})
    assert answer.status_code == 302


def test_a_wrong_token_on_the_dashboard_is_counted_with_the_internal_ones(app: Flask) -> None:
    attacker = client_at(app, "203.0.113.10")
    assert statuses(attacker, "/dashboard/", WRONG, 1) == [302]  # to the sign-in page
    assert statuses(attacker, "/internal/openapi.json", WRONG, LIMIT - 1) == [401] * (LIMIT - 1)
    assert_throttled(attacker.get("/internal/openapi.json", headers=WRONG))


def test_behind_a_trusted_proxy_the_forwarded_address_is_the_source(
    make_platform: MakePlatform,
) -> None:
    # Given one proxy in front: every request comes from its address
    app = create_app(make_platform(auth_failure_rate=f"{LIMIT}/60", trusted_proxy_hops=1))
    proxy = client_at(app, "10.0.0.2")
    attacker = {**WRONG, "X-Forwarded-For": "203.0.113.11"}
    assert statuses(proxy, "/internal/openapi.json", attacker, LIMIT) == [401] * LIMIT
    assert_throttled(proxy.get("/internal/openapi.json", headers=attacker))
    # Then a caller behind the same proxy is still served
    caller = {**AUTH, "X-Forwarded-For": "198.51.100.6"}
    assert proxy.get("/internal/openapi.json", headers=caller).status_code == 200


def test_redis_down_leaves_authentication_checked(make_platform: MakePlatform) -> None:
    # Given the throttle's Redis unreachable (a closed port)
    platform = make_platform(auth_failure_rate=f"{LIMIT}/60")
    app = create_app(platform)
    closed = RateWindows(redis.Redis.from_url("redis://127.0.0.1:1/0"), "closed")
    install_auth_throttle(app, AuthThrottle(closed, WindowRule(LIMIT, 60)))
    client = client_at(app, "203.0.113.12")
    # Then wrong tokens are still refused, right ones still served: the limit fails open
    assert statuses(client, "/internal/openapi.json", WRONG, LIMIT + 2) == [401] * (LIMIT + 2)
    assert client.get("/internal/openapi.json", headers=AUTH).status_code == 200
