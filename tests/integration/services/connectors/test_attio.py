"""Attio: no official Python SDK exists, so the fake is driven with ``requests`` and the
documented shapes (records query, record, errors), then the connector runs against it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
import redis
import requests

from services.connectors import attio as connector
from services.connectors.nodes import Connection, NodeRef, RateLimitState
from shared.errors import Delay, JobError, Unrecoverable
from testkit.fakes.attio_server import AttioServer
from testkit.fakes.protocol_server import TRANSIENT_FAILURES

TOKEN = "attio-fake"
ROOT = NodeRef("AttioObject", "people")


@pytest.fixture
def server() -> Iterator[AttioServer]:
    fake = AttioServer(TOKEN)
    with fake:
        yield fake


@pytest.fixture
def conn(server: AttioServer) -> Connection:
    return Connection(
        source="attio",
        connection_id=81,
        organization_id=8,
        base_url=server.base_url,
        credentials={"access_token": TOKEN},
        settings={"page_size": 100},
        timeout=2.0,
    )


def walk_all(conn: Connection, root: NodeRef) -> list[NodeRef]:
    refs: list[NodeRef] = []
    checkpoint: str | None = None
    while True:
        page = connector.SOURCE.walk(conn, root, checkpoint)
        refs += page.refs
        checkpoint = page.checkpoint
        if checkpoint is None:
            return refs


def test_the_documented_shapes(server: AttioServer) -> None:
    ids = server.populate("people", 3)
    headers = {"Authorization": f"Bearer {TOKEN}"}
    url = f"{server.base_url}/v2/objects/people/records"
    page = requests.post(f"{url}/query", json={"limit": 2, "offset": 1}, headers=headers, timeout=5)
    assert page.status_code == 200
    assert [r["id"]["record_id"] for r in page.json()["data"]] == ids[1:]
    record = requests.get(f"{url}/{ids[0]}", headers=headers, timeout=5).json()["data"]
    assert record["values"]["name"][0]["full_name"] == "Grace 0"
    assert set(record["id"]) == {"workspace_id", "object_id", "record_id"}
    missing = requests.get(f"{url}/nope", headers=headers, timeout=5)
    assert missing.status_code == 404 and missing.json()["code"] == "not_found"
    refused = requests.post(f"{url}/query", json={}, timeout=5)
    assert refused.status_code == 401


def test_list_roots_and_walk(server: AttioServer, conn: Connection) -> None:
    ids = server.populate("people", 230)
    server.populate("companies", 2)
    assert connector.SOURCE.list_roots(conn) == [ROOT, NodeRef("AttioObject", "companies")]
    assert [r.node_id for r in walk_all(conn, ROOT)] == [f"people/{i}" for i in ids]


def test_fetch_renders_active_values_and_dates_the_latest(
    server: AttioServer, conn: Connection
) -> None:
    ident = server.populate("people", 1)[0]
    ref = NodeRef("AttioRecord", f"people/{ident}")
    before = connector.SOURCE.fetch(conn, ref)
    assert before is not None and before.title == "Grace 0"
    assert "email_addresses: grace0@x.io" in before.text
    server.touch("people", ident, "A new description.")
    after = connector.SOURCE.fetch(conn, ref)
    assert after is not None and "description: A new description." in after.text
    assert "Record 0" not in after.text  # the superseded value is left out
    assert after.synchronization_date > before.synchronization_date
    assert connector.SOURCE.fetch(conn, NodeRef("AttioRecord", "people/nope")) is None


def test_bad_credentials_are_unrecoverable(server: AttioServer, conn: Connection) -> None:
    with pytest.raises(Unrecoverable, match="401"):
        connector.SOURCE.list_roots(replace(conn, credentials={"access_token": "x"}))
    with pytest.raises(Unrecoverable, match="no access_token"):
        connector.SOURCE.list_roots(replace(conn, credentials={}))


@pytest.mark.parametrize(
    ("kind", "options", "error"),
    [case[1:] for case in TRANSIENT_FAILURES],
    ids=[case[0] for case in TRANSIENT_FAILURES],
)
def test_transient_failures(
    server: AttioServer,
    conn: Connection,
    kind: str,
    options: dict[str, Any],
    error: type[JobError],
) -> None:
    server.populate("people", 3)
    server.fail("/v2/objects/people/records/query", kind, **options)
    with pytest.raises(error):
        connector.SOURCE.walk(conn, ROOT, None)
    assert len(connector.SOURCE.walk(conn, ROOT, None).refs) == 3


def test_429_with_a_retry_after_date_delays(
    server: AttioServer, conn: Connection, redis_client: redis.Redis, namespace: str
) -> None:
    conn = replace(conn, rate_limits=RateLimitState(redis_client, namespace))
    server.populate("people", 3)
    server.rate_limit = 0
    with pytest.raises(Delay) as caught:
        connector.SOURCE.walk(conn, ROOT, None)
    assert caught.value.until - time.time() <= 2.5  # "usually the following second"
