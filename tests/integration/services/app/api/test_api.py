"""The internal API against real Redis and PostgreSQL: auth, validation, limits, 503, health,
OpenAPI, and ``speedtier api`` under gunicorn."""

from __future__ import annotations

import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import requests
from click.testing import CliRunner
from flask import Flask
from flask.testing import FlaskClient

from services.apikit.enqueue import enqueue_blueprint
from services.app.api import create_app
from services.app.api.openapi_document import openapi_path
from services.app.bootstrap import Platform
from services.app.cli import main
from services.app.internal_token import MissingToken
from shared.config import load_settings
from testkit.ports import free_port
from tests import REPO
from tests import platform_harness as h
from tests.fixtures_platform import AUTH, CREDENTIALS_KEY, TOKEN, MakePlatform

MAX_BODY = 4096


def api_platform(make_platform: MakePlatform, **settings: Any) -> Platform:
    """The platform with its services, plus the harness's ``t_plain`` family (tenant-scoped,
    param ``item``) and a service blueprint built with the shared enqueue helper."""
    platform = make_platform(
        families=[h.families()["t_plain"]], **{"api_max_body_bytes": MAX_BODY, **settings}
    )
    platform.add_routes(
        lambda: [
            enqueue_blueprint("plain_service", "/internal/plain_service", {"t_plain"}, "Plain jobs")
        ]
    )
    return platform


@pytest.fixture
def platform(make_platform: MakePlatform) -> Platform:
    return api_platform(make_platform)


def plain(item: str, org: int = 7, **extra: Any) -> dict[str, Any]:
    return {"kind": "t_plain", "organization_id": org, "item": item, **extra}


def post(client: FlaskClient, body: Any, path: str = "/internal/jobs/enqueue") -> Any:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()
    return client.post(path, data=data, headers={**AUTH, "Content-Type": "application/json"})


def queued(platform: Platform) -> int:
    """Messages waiting in the t_plain queue."""
    return int(platform.broker.client.llen(f"{platform.settings.redis_namespace}:t_plain.fast"))


def concrete(rule: str) -> str:
    """A URL matching ``rule``, with every argument filled in."""
    return openapi_path(rule).replace("{", "").replace("}", "")


def internal_routes(app: Flask) -> list[tuple[str, str]]:
    routes = []
    for rule in app.url_map.iter_rules():
        if rule.rule.startswith("/internal"):
            for method in sorted((rule.methods or set()) - {"HEAD", "OPTIONS"}):
                routes.append((method, concrete(rule.rule)))
    return routes


# -- authentication ------------------------------------------------------------------------


def test_every_internal_route_needs_the_token(make_platform: MakePlatform) -> None:
    # Four wrong credentials a route, all from the test client's address: a limit that
    # leaves them all answered (test_auth_throttle checks the limit itself).
    app = create_app(api_platform(make_platform, auth_failure_rate="1000/60"))
    client = app.test_client()
    routes = internal_routes(app)
    assert ("POST", "/internal/jobs/enqueue") in routes
    assert ("POST", "/internal/plain_service/enqueue") in routes
    assert ("GET", "/internal/openapi.json") in routes

    for method, path in [*routes, ("GET", "/internal/no-such-route")]:
        for headers in (
            {},
            {"Authorization": "Bearer wrong"},
            {"Authorization": f"Bearer {TOKEN}x"},
            {"Authorization": f"Basic {TOKEN}"},
            {"Authorization": "Bearer"},
        ):
            response = client.open(path, method=method, headers=headers, json={"requests": []})
            assert response.status_code == 401, (method, path, headers)
            assert response.json is not None and response.json["error"] == "unauthorized"
            assert response.headers["WWW-Authenticate"].startswith("Bearer ")


def test_the_right_token_passes_and_health_needs_none(client: FlaskClient) -> None:
    assert client.get("/internal/openapi.json", headers=AUTH).status_code == 200
    assert client.get("/internal/jobs/none", headers={"Authorization": f"bearer {TOKEN}"}).json
    assert client.get("/healthz").json == {"status": "ok"}
    assert client.get("/readyz").status_code == 200


def test_refuses_to_start_in_production_without_a_token(
    redis_url: str, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("INTERNAL_API_TOKEN", raising=False)
    for environment in ("production", "staging"):
        settings = load_settings(
            redis_url=redis_url,
            database_url=database_url,
            environment=environment,
            connector_credentials_key=CREDENTIALS_KEY,
        )
        with pytest.raises(MissingToken, match="INTERNAL_API_TOKEN"):
            create_app(settings=settings)
        blank = settings.model_copy(update={"internal_api_token": None})
        with pytest.raises(MissingToken):
            create_app(settings=blank)

    result = CliRunner().invoke(
        main,
        ["api"],
        env={
            "SPEEDTIER_ENV": "production",
            "INTERNAL_API_TOKEN": "",
            "SPEEDTIER_CONNECTOR_CREDENTIALS_KEY": CREDENTIALS_KEY,
        },
    )
    assert result.exit_code == 1
    assert "INTERNAL_API_TOKEN is not set" in result.output


def test_development_without_a_token_is_open_and_says_so(
    make_platform: MakePlatform,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("INTERNAL_API_TOKEN", raising=False)
    platform = api_platform(make_platform, internal_api_token=None, environment="development")
    with caplog.at_level(logging.WARNING, logger="services.app.api"):
        client = create_app(platform).test_client()
    assert "OPEN" in caplog.text
    response = client.post("/internal/jobs/enqueue", json={"requests": [plain("open")]})
    assert response.status_code == 202


# -- validation ----------------------------------------------------------------------------

BAD_INPUTS: list[tuple[str, Any, str, str]] = [
    ("malformed JSON", b'{"requests": [', "body", "Invalid JSON"),
    ("empty body", b"", "body", "Invalid JSON"),
    ("not an object", [plain("a")], "body", "should be an object"),
    ("requests not a list", {"requests": plain("a")}, "requests", "valid array"),
    ("empty requests", {"requests": []}, "requests", "at least 1 item"),
    ("unknown top-level field", {"requests": [plain("a")], "x": 1}, "x", "not permitted"),
    ("missing kind", {"requests": [{"organization_id": 1, "item": "a"}]}, "requests[0].kind", ""),
    (
        "missing organization",
        {"requests": [{"kind": "t_plain", "item": "a"}]},
        "requests[0].organization_id",
        "Field required",
    ),
    (
        "organization as a string",
        {"requests": [plain("a", org="7")]},
        "requests[0].organization_id",
        "valid integer",
    ),
    (
        "organization as a boolean",
        {"requests": [plain("a", org=True)]},
        "requests[0].organization_id",
        "valid integer",
    ),
    (
        "organization not positive",
        {"requests": [plain("a", org=0)]},
        "requests[0].organization_id",
        "greater than or equal to 1",
    ),
    (
        "null organization for a tenant kind",
        {"requests": [plain("a", org=None)]},
        "requests[0].organization_id",
        "valid integer",
    ),
    (
        "organization for a platform kind",
        {"requests": [{"kind": "tick:group-slot-reaper", "organization_id": 7, "slot": "s"}]},
        "requests[0].organization_id",
        "should be null",
    ),
    (
        "parameter as a numeric string",
        {"requests": [plain("a", times="3")]},
        "requests[0].times",
        "valid integer",
    ),
    (
        "parameter with a fraction",
        {"requests": [plain("a", times=3.5)]},
        "requests[0].times",
        "valid integer",
    ),
    (
        "unknown parameter",
        {"requests": [plain("a", colour="red")]},
        "requests[0].colour",
        "not permitted",
    ),
    (
        "kind not a string",
        {"requests": [{"kind": 5, "organization_id": 1}]},
        "requests[0].kind",
        "valid string",
    ),
    (
        "unknown kind",
        {"requests": [{"kind": "no_such_kind", "organization_id": 1}]},
        "requests[0].kind",
        "unknown kind",
    ),
    (
        "missing parameter",
        {"requests": [{"kind": "t_plain", "organization_id": 1}]},
        "requests[0].item",
        "Field required",
    ),
    (
        "parameter of the wrong type",
        {"requests": [plain("a", sleep="long")]},
        "requests[0].sleep",
        "valid number",
    ),
]


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [case[1:] for case in BAD_INPUTS],
    ids=[case[0] for case in BAD_INPUTS],
)
def test_bad_input_is_a_400_naming_the_field_and_changes_nothing(
    client: FlaskClient, platform: Platform, body: Any, field: str, message: str
) -> None:
    response = post(client, body)

    assert response.status_code == 400
    assert response.json["error"] == "invalid_request"
    assert field in response.json["fields"], response.json
    assert message in response.json["fields"][field]
    assert queued(platform) == 0


def test_a_batch_with_one_bad_item_accepts_none(client: FlaskClient, platform: Platform) -> None:
    response = post(client, {"requests": [plain("good"), plain("bad", org=-1), plain("ok2")]})

    assert response.status_code == 400
    assert list(response.json["fields"]) == ["requests[1].organization_id"]
    assert queued(platform) == 0
    assert client.get("/internal/jobs/plain-good", headers=AUTH).status_code == 404


def test_a_service_route_accepts_only_its_kinds(client: FlaskClient, platform: Platform) -> None:
    tick = {"kind": "tick:group-slot-reaper", "organization_id": None, "slot": "s"}
    refused = post(client, {"requests": [plain("a"), tick]}, "/internal/plain_service/enqueue")
    accepted = post(client, {"requests": [plain("a")]}, "/internal/plain_service/enqueue")

    assert refused.status_code == 400
    assert "not accepted here" in refused.json["fields"]["requests[1].kind"]
    assert accepted.status_code == 202
    assert accepted.json["jobs"][0]["job_id"] == "plain-a"


def test_a_body_over_the_limit_is_a_413(client: FlaskClient, platform: Platform) -> None:
    body = {"requests": [plain("big", mode="x" * MAX_BODY)]}

    response = post(client, body)

    assert response.status_code == 413
    assert response.json == {
        "error": "payload_too_large",
        "message": f"the body is over {MAX_BODY} bytes",
        "limit_bytes": MAX_BODY,
    }
    assert queued(platform) == 0


def test_errors_are_json(client: FlaskClient) -> None:
    missing = client.get("/nowhere")
    wrong_method = client.delete("/internal/jobs/enqueue", headers=AUTH)

    assert (missing.status_code, missing.json["error"]) == (404, "not_found")
    assert (wrong_method.status_code, wrong_method.json["error"]) == (405, "method_not_allowed")
    assert "POST" in wrong_method.headers["Allow"]


# -- enqueue and lookup --------------------------------------------------------------------


def test_202_reports_added_then_deduplicated(client: FlaskClient, platform: Platform) -> None:
    first = post(client, {"requests": [plain("a"), plain("b", org=8)]})
    again = post(client, {"requests": [plain("a")]})

    assert first.status_code == 202
    assert first.json == {
        "jobs": [
            {"job_id": "plain-a", "outcome": "added", "queue": "t_plain.fast", "kind": "t_plain"},
            {"job_id": "plain-b", "outcome": "added", "queue": "t_plain.fast", "kind": "t_plain"},
        ]
    }
    assert again.status_code == 202
    assert again.json["jobs"][0]["outcome"] == "deduplicated"
    assert queued(platform) == 2


def test_a_job_record_is_scoped_by_organization(client: FlaskClient) -> None:
    post(client, {"requests": [plain("a", org=7)]})

    record = client.get("/internal/jobs/plain-a", headers=AUTH)
    own = client.get("/internal/jobs/plain-a?organization_id=7", headers=AUTH)
    other = client.get("/internal/jobs/plain-a?organization_id=8", headers=AUTH)
    unknown = client.get("/internal/jobs/plain-zzz", headers=AUTH)
    bad = client.get("/internal/jobs/plain-a?organization_id=seven", headers=AUTH)

    assert record.status_code == own.status_code == 200
    assert record.json["state"] == "waiting"
    assert record.json["organization_id"] == 7
    assert record.json["family"] == "t_plain"
    assert other.status_code == unknown.status_code == 404
    assert bad.status_code == 400 and "organization_id" in bad.json["fields"]


# -- Redis and PostgreSQL down -------------------------------------------------------------


class RedisServer:
    """A private ``redis-server`` on a free port, to stop and start at will."""

    def __init__(self, directory: Path) -> None:
        self.binary = shutil.which("redis-server") or "/usr/bin/redis-server"
        self.port = free_port()
        self.directory = directory
        self.process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        command = [self.binary, "--port", str(self.port), "--bind", "127.0.0.1"]
        command += ["--save", "", "--appendonly", "no", "--dir", str(self.directory)]
        self.process = subprocess.Popen(command, stdout=subprocess.DEVNULL)
        client = redis.Redis.from_url(self.url)
        h.wait_until(lambda: _answers(client), timeout=10)
        client.close()

    def kill(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait(timeout=10)
            self.process = None


def _answers(client: redis.Redis) -> bool:
    try:
        return bool(client.ping())
    except redis.ConnectionError:
        return False


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    if not os.path.exists(shutil.which("redis-server") or "/usr/bin/redis-server"):
        pytest.fail("redis-server is needed to test a Redis outage")
    server = RedisServer(tmp_path)
    server.start()
    yield server
    server.kill()


def test_503_not_202_while_redis_is_down(
    redis_server: RedisServer, make_platform: MakePlatform
) -> None:
    platform = api_platform(make_platform, redis_url=redis_server.url)
    client = create_app(platform).test_client()
    assert post(client, {"requests": [plain("before")]}).status_code == 202

    redis_server.kill()
    for path in ("/internal/jobs/enqueue", "/internal/plain_service/enqueue"):
        response = post(client, {"requests": [plain("during")]}, path)
        assert response.status_code == 503, path
        assert response.json["error"] == "queue_unavailable"
        assert response.headers["Retry-After"] == "5"
    lookup = client.get("/internal/jobs/plain-before", headers=AUTH)
    assert (lookup.status_code, lookup.json["error"]) == (503, "queue_unavailable")
    ready = client.get("/readyz")
    assert ready.status_code == 503
    assert ready.json == {
        "status": "not_ready",
        "checks": {"redis": "unreachable", "postgresql": "ok"},
    }

    redis_server.start()  # an empty server on the same port: the API recovers by itself
    after = post(client, {"requests": [plain("during")]})
    assert after.status_code == 202
    assert after.json["jobs"][0]["outcome"] == "added"
    assert client.get("/readyz").status_code == 200


def test_readyz_follows_postgresql(make_platform: MakePlatform) -> None:
    nowhere = f"postgresql://postgres@127.0.0.1:{free_port()}/speedtier"
    platform = api_platform(make_platform, database_url=nowhere)
    response = create_app(platform).test_client().get("/readyz")

    assert response.status_code == 503
    assert response.json["checks"] == {"redis": "ok", "postgresql": "unreachable"}


def test_speedtier_ready_exit_status(redis_url: str, database_url: str) -> None:
    runner = CliRunner()
    up = runner.invoke(main, ["ready"], env={"REDIS_URL": redis_url, "DATABASE_URL": database_url})
    down = runner.invoke(
        main,
        ["ready"],
        env={"REDIS_URL": f"redis://127.0.0.1:{free_port()}/0", "DATABASE_URL": database_url},
    )

    assert up.exit_code == 0, up.output
    assert "redis: ok" in up.output and "postgresql: ok" in up.output
    assert down.exit_code == 1
    assert "redis: not ready" in down.output


# -- OpenAPI -------------------------------------------------------------------------------


def test_openapi_describes_every_route(app: Flask, client: FlaskClient) -> None:
    document = client.get("/internal/openapi.json", headers=AUTH).json

    assert document["openapi"].startswith("3.1")
    for rule in app.url_map.iter_rules():
        if rule.endpoint.startswith("dashboard."):  # pages for people, not the API
            assert not any(path.startswith("/dashboard") for path in document["paths"])
            continue
        operations = document["paths"][openapi_path(rule.rule)]
        for method in (rule.methods or set()) - {"HEAD", "OPTIONS"}:
            operation = operations[method.lower()]
            assert operation["summary"] and operation["responses"], rule.rule
            if rule.rule.startswith("/internal"):
                assert operation["security"] == [{"bearerAuth": []}]
                assert "401" in operation["responses"]
    enqueue = document["paths"]["/internal/jobs/enqueue"]["post"]
    assert enqueue["requestBody"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/EnqueueBody"
    }
    assert {"202", "400", "401", "413", "503"} <= set(enqueue["responses"])
    schemas = document["components"]["schemas"]
    assert {"EnqueueBody", "TPlainRequest", "EnqueueAccepted", "JobRecord"} <= set(schemas)
    # One request schema per kind, chosen by ``kind``: the kind's parameters, its tenancy.
    items = schemas["EnqueueBody"]["properties"]["requests"]["items"]
    assert items["discriminator"]["propertyName"] == "kind"
    assert items["discriminator"]["mapping"]["t_plain"] == "#/components/schemas/TPlainRequest"
    plain_request = schemas["TPlainRequest"]
    assert {"kind", "organization_id", "item"} <= set(plain_request["required"])
    assert plain_request["additionalProperties"] is False
    assert plain_request["properties"]["organization_id"]["type"] == "integer"
    tick = schemas["TickGroupSlotReaperRequest"]["properties"]
    assert tick["organization_id"]["type"] == "null"
    assert tick["slot"]["pattern"] == "^[^\\x00]*$"
    service = document["paths"]["/internal/plain_service/enqueue"]["post"]["requestBody"]
    service_schema = service["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[1]
    service_items = schemas[service_schema]["properties"]["requests"]["items"]
    assert set(service_items["discriminator"]["mapping"]) == {"t_plain"}
    assert document["components"]["securitySchemes"]["bearerAuth"]["scheme"] == "bearer"
    assert "t_plain" in document["paths"]["/internal/plain_service/enqueue"]["post"]["description"]


# -- speedtier api (gunicorn) --------------------------------------------------------------


def _get(url: str, **kwargs: Any) -> requests.Response | None:
    """The answer, or None while the server is not answering yet (refused, or accepted by a
    worker still booting: on a loaded machine that takes seconds)."""
    try:
        return requests.get(url, timeout=10, **kwargs)
    except (requests.ConnectionError, requests.Timeout):
        return None


def _eventually(check: Callable[[], Any], timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError("timed out")


@pytest.mark.slow
def test_speedtier_api_serves_with_gunicorn(
    redis_url: str, database_url: str, namespace: str
) -> None:
    port = free_port()
    env = {
        **os.environ,
        "REDIS_URL": redis_url,
        "DATABASE_URL": database_url,
        "SPEEDTIER_REDIS_NAMESPACE": namespace,
        "SPEEDTIER_ENV": "production",
        "SPEEDTIER_ALLOW_VOLATILE_REDIS": "1",  # the test Redis runs without AOF
        "INTERNAL_API_TOKEN": TOKEN,
        "SPEEDTIER_CONNECTOR_CREDENTIALS_KEY": CREDENTIALS_KEY,
    }
    command = [
        sys.executable,
        "-m",
        "services.app.cli",
        "api",
        "--port",
        str(port),
        "--workers",
        "1",
    ]
    process = subprocess.Popen(command, cwd=REPO, env=env, stderr=subprocess.PIPE)
    base = f"http://127.0.0.1:{port}"
    try:
        _eventually(lambda: _get(f"{base}/healthz"), timeout=30)
        assert _get(f"{base}/readyz").status_code == 200
        assert _get(f"{base}/internal/openapi.json").status_code == 401
        body = {"requests": [{"kind": "tick:group-slot-reaper", "organization_id": None}]}
        body["requests"][0]["slot"] = "api-e2e"
        response = requests.post(
            f"{base}/internal/jobs/enqueue", json=body, headers=AUTH, timeout=5
        )
        assert response.status_code == 202, response.text
        assert response.json()["jobs"][0]["job_id"] == "group-slot-reaper-tick-api-e2e"
    finally:
        process.send_signal(signal.SIGTERM)
        _, stderr = process.communicate(timeout=40)
    assert process.returncode == 0, stderr.decode()[-2000:]
