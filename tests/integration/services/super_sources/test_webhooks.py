"""``POST /webhooks/<source>/<path>``: signatures, replays, stale timestamps, unknown paths,
and the delivery's work on the source's webhook tier."""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from collections.abc import Callable
from datetime import UTC, datetime

import pytest
import redis
from flask.testing import FlaskClient

from services.app.bootstrap import Platform
from shared.db.engine import session_scope
from shared.db.models.super_sources import SuperSourceNode
from tests import platform_harness as h
from tests.fixtures_platform import MakePlatform
from tests.integration.services.super_sources import tracker
from tests.integration.services.super_sources.conftest import make_connection, workers

SECRET = "s3cret"
T0 = datetime(2026, 11, 1, tzinfo=UTC)


@pytest.fixture
def platform(super_platform: Platform) -> Platform:
    """The API's app and client over the tracker registry."""
    return super_platform


def _post(
    client: FlaskClient,
    payload: dict[str, object],
    *,
    source: str = "gitlab",
    path: str = "events",
    connection: int | str | None = None,
    secret: str = SECRET,
    stamp: int | None = None,
    body: bytes | None = None,
) -> tuple[int, dict[str, object]]:
    raw = body if body is not None else json.dumps(payload).encode()
    stamp = int(time.time()) if stamp is None else stamp
    query = f"?connection={connection}" if connection is not None else ""
    response = client.post(
        f"/webhooks/{source}/{path}{query}",
        data=raw,
        headers={
            "Content-Type": "application/json",
            "X-Tracker-Timestamp": str(stamp),
            "X-Tracker-Signature": tracker.sign(secret, raw, stamp),
        },
    )
    return response.status_code, response.get_json(silent=True) or {}


def _queued(platform: Platform, queue: str) -> int:
    return platform.broker.queue_depths([queue])[queue][0]


def test_a_signed_delivery_is_accepted_on_the_fast_tier_and_its_node_indexed(
    platform: Platform,
    client: FlaskClient,
    redis_client: redis.Redis,
    namespace: str,
    organization: Callable[[], int],
) -> None:
    org = organization()
    conn = make_connection(platform, org, "gitlab", webhook_secret=SECRET)
    root = f"w{org}"
    tracker.put_nodes(redis_client, namespace, root, {f"{root}/1": ("hooked text", T0)})
    delivery = {"delivery": f"d-{org}", "root": root, "nodes": [f"{root}/1"]}
    status, body = _post(client, delivery, connection=conn)
    assert status == 202 and body["queue"] == "super_webhook.fast"
    with workers(platform):
        h.wait_until(lambda: h.state(platform.broker, str(body["job_id"])) == "completed")
        h.wait_until(lambda: _indexed(platform, org) == 1)


def _indexed(platform: Platform, org: int) -> int:
    with session_scope(platform.sessions) as session:
        return session.query(SuperSourceNode).filter_by(organization_id=org).count()


def test_a_replayed_delivery_is_refused(
    platform: Platform, client: FlaskClient, organization: Callable[[], int]
) -> None:
    conn = make_connection(platform, organization(), "acme", webhook_secret=SECRET)
    delivery = {"delivery": "same-id", "nodes": ["x/1"]}
    assert _post(client, delivery, source="acme", connection=conn)[0] == 202
    status, body = _post(client, delivery, source="acme", connection=conn)
    assert (status, body["status"]) == (200, "duplicate")
    assert _queued(platform, "super_webhook.slow") == 1


@pytest.mark.parametrize(
    ("case", "expected"),
    [("wrong secret", 401), ("stale timestamp", 401), ("unsigned", 401), ("malformed", 400)],
)
def test_a_delivery_that_does_not_verify_is_refused_and_nothing_is_enqueued(
    platform: Platform,
    client: FlaskClient,
    organization: Callable[[], int],
    case: str,
    expected: int,
) -> None:
    conn = make_connection(platform, organization(), "gitlab", webhook_secret=SECRET)
    delivery = {"delivery": "d1", "nodes": ["x/1"]}
    if case == "wrong secret":
        status, _ = _post(client, delivery, connection=conn, secret="guess")
    elif case == "stale timestamp":
        status, _ = _post(client, delivery, connection=conn, stamp=int(time.time()) - 301)
    elif case == "unsigned":
        status = client.post(
            f"/webhooks/gitlab/events?connection={conn}", json=delivery
        ).status_code
    else:
        status, _ = _post(client, {}, connection=conn, body=b"{not json")
    assert status == expected
    assert _queued(platform, "super_webhook.fast") == 0


@pytest.mark.parametrize(
    ("source", "path", "connection", "expected"),
    [
        ("nosuch", "events", "1", 404),
        ("gitlab", "nosuch", "1", 404),
        ("gitlab", "events", "999999999", 404),
        ("gitlab", "events", "abc", 400),
        ("gitlab", "events", "%C2%B2", 400),  # "²": a digit to str.isdigit, not to int()
        ("gitlab", "events", None, 404),
    ],
)
def test_unknown_sources_paths_and_connections_are_answered_4xx(
    platform: Platform,
    client: FlaskClient,
    source: str,
    path: str,
    connection: str | None,
    expected: int,
) -> None:
    status, _ = _post(client, {"delivery": "d"}, source=source, path=path, connection=connection)
    assert status == expected


def test_without_a_connection_parameter_the_payloads_root_names_the_connection(
    platform: Platform, client: FlaskClient, organization: Callable[[], int]
) -> None:
    org = organization()
    make_connection(platform, org, "acme", webhook_secret=SECRET, webhook_key=f"root{org}")
    status, body = _post(client, {"delivery": "k1", "root": f"root{org}"}, source="acme")
    assert status == 202 and body["queue"] == "super_webhook.slow"
    record = platform.broker.jobs.record(str(body["job_id"])) or {}
    assert record["state"] == "waiting"


def test_a_github_delivery_is_verified_with_x_hub_signature_256(
    make_platform: MakePlatform, organization: Callable[[], int]
) -> None:
    from services.app.api import create_app

    production = make_platform()  # the default registry: the real GitHub connector
    client = create_app(production).test_client()
    org = organization()
    conn = make_connection(production, org, "github", webhook_secret=SECRET)
    payload = json.dumps(
        {"action": "edited", "issue": {"number": 7}, "repository": {"full_name": "octo/hello"}}
    ).encode()
    signature = "sha256=" + hmac.new(SECRET.encode(), payload, hashlib.sha256).hexdigest()
    headers = {"X-GitHub-Event": "issues", "X-GitHub-Delivery": f"gh-{org}"}

    def post(sig: str) -> int:
        return client.post(
            f"/webhooks/github/events?connection={conn}",
            data=payload,
            headers={**headers, "X-Hub-Signature-256": sig, "Content-Type": "application/json"},
        ).status_code

    assert post("sha256=" + "0" * 64) == 401
    assert post(signature) == 202
    assert post(signature) == 200  # the same delivery again
    assert production.broker.queue_depths(["super_webhook.fast"])["super_webhook.fast"][0] == 1


def test_a_linear_delivery_is_verified_with_its_signature_and_timestamp_window(
    make_platform: MakePlatform, organization: Callable[[], int]
) -> None:
    from services.app.api import create_app

    production = make_platform()
    client = create_app(production).test_client()
    org = organization()
    conn = make_connection(production, org, "linear", webhook_secret=SECRET)

    def post(sent_ms: int, delivery: str) -> int:
        body = json.dumps(
            {
                "action": "update",
                "type": "Issue",
                "data": {"id": "issue-1", "teamId": "team-1"},
                "webhookTimestamp": sent_ms,
            }
        ).encode()
        signature = hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
        return client.post(
            f"/webhooks/linear/events?connection={conn}",
            data=body,
            headers={"Linear-Signature": signature, "Linear-Delivery": delivery},
        ).status_code

    now_ms = int(time.time() * 1000)
    assert post(now_ms - 120_000, f"stale-{org}") == 401  # signed, but outside the window
    assert post(now_ms, f"fresh-{org}") == 202
    assert production.broker.queue_depths(["super_webhook.fast"])["super_webhook.fast"][0] == 1


def test_a_deliverys_nodes_are_indexed_by_index_jobs_under_the_index_cap(
    platform: Platform,
    client: FlaskClient,
    redis_client: redis.Redis,
    namespace: str,
    organization: Callable[[], int],
) -> None:
    """Seed 004's ``scheduleNodeIndexations``: even a delivery naming a few nodes gets one
    index job per node, run under the organization's index cap (2 on the slow tier), never
    indexed by the webhook job itself."""
    from services.super_sources.families import IndexParams, index_job_id

    org = organization()
    conn = make_connection(
        platform, org, "acme", webhook_secret=SECRET, settings={"fetch_sleep": 0.3}
    )
    root, count = f"b{org}", 6
    nodes = [f"{root}/{n}" for n in range(count)]
    tracker.put_nodes(redis_client, namespace, root, {n: ("bulk", T0) for n in nodes})
    status, body = _post(
        client,
        {"delivery": f"bulk-{org}", "root": root, "nodes": nodes},
        source="acme",
        connection=conn,
    )
    assert status == 202
    with workers(platform, threads=8):
        h.wait_until(lambda: h.state(platform.broker, str(body["job_id"])) == "completed")
        h.wait_until(lambda: _indexed(platform, org) == count)
    # each node had its own index job (under the delivery's root), and they ran in parallel
    # up to the slow tier's index cap
    for node in nodes:
        params = IndexParams(
            source="acme",
            connection_id=conn,
            root_node_type=tracker.ROOT_TYPE,
            root_node_id=root,
            node_type=tracker.NODE_TYPE,
            node_id=node,
        )
        assert h.state(platform.broker, index_job_id(org, params)) == "completed"
    assert tracker.max_active(redis_client, namespace, f"acme:{org}") == 2


def test_a_gitlab_delivery_is_verified_with_x_gitlab_token(
    make_platform: MakePlatform, organization: Callable[[], int]
) -> None:
    from services.app.api import create_app

    production = make_platform()
    client = create_app(production).test_client()
    org = organization()
    conn = make_connection(production, org, "gitlab", webhook_secret=SECRET)
    body = json.dumps(
        {"object_kind": "issue", "project": {"id": 42}, "object_attributes": {"iid": 3}}
    ).encode()

    def post(token: str, delivery: str) -> int:
        return client.post(
            f"/webhooks/gitlab/events?connection={conn}",
            data=body,
            headers={
                "X-Gitlab-Token": token,
                "X-Gitlab-Event": "Issue Hook",
                "X-Gitlab-Event-UUID": delivery,
            },
        ).status_code

    assert post("guess", f"g1-{org}") == 401
    assert post(SECRET, f"g2-{org}") == 202
    assert production.broker.queue_depths(["super_webhook.fast"])["super_webhook.fast"][0] == 1


def test_gitlab_replays_are_told_by_idempotency_key_not_by_the_event_uuid(
    make_platform: MakePlatform, organization: Callable[[], int]
) -> None:
    """GitLab keeps ``Idempotency-Key`` across the retries of one event, and gives every
    webhook triggered by another the same ``X-Gitlab-Event-UUID``
    (https://docs.gitlab.com/user/project/integrations/webhooks/#delivery-headers)."""
    from services.app.api import create_app
    from testkit.fakes.gitlab_server import item_payload, signed_delivery

    production = make_platform()
    client = create_app(production).test_client()
    conn = make_connection(production, organization(), "gitlab", webhook_secret=SECRET)

    def post(iid: int, key: str, chain: str) -> tuple[int, str]:
        payload = item_payload(42, "issue", iid)
        headers, body = signed_delivery(
            "Issue Hook", payload, SECRET, delivery_id=key, chain_id=chain
        )
        answer = client.post(
            f"/webhooks/gitlab/events?connection={conn}", data=body, headers=headers
        )
        return answer.status_code, answer.get_json()["status"]

    # Two different events of one recursive chain: both are work
    assert post(3, "key-1", "chain-1") == (202, "accepted")
    assert post(4, "key-2", "chain-1") == (202, "accepted")
    # A retry of the first (same Idempotency-Key): a duplicate
    assert post(3, "key-1", "chain-1") == (200, "duplicate")
    assert production.broker.queue_depths(["super_webhook.fast"])["super_webhook.fast"][0] == 2


@pytest.mark.parametrize(
    "payload",
    [
        {"object_kind": "issue", "project": {"id": 42}, "object_attributes": "x"},
        {"object_kind": "issue", "project": {"id": "4\x002"}, "object_attributes": {"iid": 3}},
        {
            "object_kind": "note",
            "project": {"id": 42},
            "object_attributes": {"noteable_type": "Issue"},
            "issue": "x",
        },
    ],
)
def test_a_malformed_gitlab_delivery_is_answered_4xx_with_or_without_its_connection(
    make_platform: MakePlatform, organization: Callable[[], int], payload: dict[str, object]
) -> None:
    from services.app.api import create_app

    production = make_platform()
    client = create_app(production).test_client()
    conn = make_connection(production, organization(), "gitlab", webhook_secret=SECRET)
    headers = {"X-Gitlab-Token": SECRET, "X-Gitlab-Event-UUID": "m1"}
    raw = json.dumps(payload).encode()
    # Read only to find its connection, unsigned: no connection takes it.
    assert client.post("/webhooks/gitlab/events", data=raw, headers=headers).status_code == 404
    signed = client.post(f"/webhooks/gitlab/events?connection={conn}", data=raw, headers=headers)
    assert signed.status_code == 400 and "gitlab webhook m1" in signed.get_json()["error"]
    deep = client.post("/webhooks/gitlab/events", data=b"[" * 100_000, headers=headers)
    assert deep.status_code == 404
    assert production.broker.queue_depths(["super_webhook.fast"])["super_webhook.fast"][0] == 0
