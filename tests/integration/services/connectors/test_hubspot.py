"""HubSpot: the CRM v3 fake driven by hubspot-api-client, then the connector against it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
import redis
from hubspot import HubSpot
from hubspot.crm.objects.exceptions import NotFoundException

from services.connectors import hubspot as connector
from services.connectors.nodes import Connection, NodeRef, RateLimitState
from shared.errors import Delay, JobError, Unrecoverable
from testkit.fakes.hubspot_server import HubspotServer
from testkit.fakes.protocol_server import TRANSIENT_FAILURES

TOKEN = "pat-na1-fake"
ROOT = NodeRef("HubspotObjectType", "contacts")


@pytest.fixture
def server() -> Iterator[HubspotServer]:
    fake = HubspotServer(TOKEN)
    with fake:
        yield fake


@pytest.fixture
def conn(server: HubspotServer) -> Connection:
    return Connection(
        source="hubspot",
        connection_id=71,
        organization_id=7,
        base_url=server.base_url,
        credentials={"access_token": TOKEN},
        settings={},
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
            assert page.watermark is None  # every walk is a complete listing
            return refs


def test_the_sdk_pages_with_after_and_reads_objects(server: HubspotServer) -> None:
    ids = server.populate("contacts", 150)
    client = HubSpot(access_token=TOKEN, host=server.base_url)
    page = client.crm.contacts.basic_api.get_page(limit=100, properties=["email"])
    assert len(page.results) == 100 and page.paging.next.after == ids[99]
    assert [c.id for c in client.crm.contacts.get_all()] == ids
    contact = client.crm.objects.basic_api.get_by_id("contacts", ids[0], properties=["email"])
    assert contact.properties["email"] == "ada0@x.io"
    with pytest.raises(NotFoundException):
        client.crm.objects.basic_api.get_by_id("contacts", "1")


def test_walk_lists_every_record_with_its_date(server: HubspotServer, conn: Connection) -> None:
    ids = server.populate("contacts", 230)
    server.populate("deals", 5)
    assert connector.SOURCE.list_roots(conn)[0] == ROOT
    refs = walk_all(conn, ROOT)
    assert [r.node_id for r in refs] == [f"contacts/{i}" for i in ids]
    first = connector.SOURCE.walk(conn, ROOT, None)
    server.touch("contacts", ids[0], email="new@x.io")
    again = connector.SOURCE.walk(conn, ROOT, None)
    ref = NodeRef("HubspotObject", f"contacts/{ids[0]}")
    assert again.dates[ref] > first.dates[ref]  # the index fetches only this one again


def test_fetch_renders_properties(server: HubspotServer, conn: Connection) -> None:
    ident = server.populate("contacts", 1)[0]
    node = connector.SOURCE.fetch(conn, NodeRef("HubspotObject", f"contacts/{ident}"))
    assert node is not None and node.title == "Ada0 Lovelace"
    assert "email: ada0@x.io" in node.text
    assert connector.SOURCE.fetch(conn, NodeRef("HubspotObject", "contacts/1")) is None


def test_bad_credentials_are_unrecoverable(server: HubspotServer, conn: Connection) -> None:
    server.populate("contacts", 1)
    with pytest.raises(Unrecoverable, match="401"):
        connector.SOURCE.walk(replace(conn, credentials={"access_token": "x"}), ROOT, None)
    with pytest.raises(Unrecoverable, match="no access_token"):
        connector.SOURCE.walk(replace(conn, credentials={}), ROOT, None)


@pytest.mark.parametrize(
    ("kind", "options", "error"),
    [case[1:] for case in TRANSIENT_FAILURES],
    ids=[case[0] for case in TRANSIENT_FAILURES],
)
def test_transient_failures(
    server: HubspotServer,
    conn: Connection,
    kind: str,
    options: dict[str, Any],
    error: type[JobError],
) -> None:
    if kind == "429":
        error = Delay  # HubSpot sends no Retry-After: one rate-limit interval is the wait
    server.populate("contacts", 3)
    server.fail("/crm/v3/objects/contacts", kind, **options)
    with pytest.raises(error):
        connector.SOURCE.walk(conn, ROOT, None)
    assert len(connector.SOURCE.walk(conn, ROOT, None).refs) == 3


def test_burst_limit_headers_and_429_block_the_connection(
    server: HubspotServer, conn: Connection, redis_client: redis.Redis, namespace: str
) -> None:
    state = RateLimitState(redis_client, namespace)
    conn = replace(conn, rate_limits=state)
    server.populate("contacts", 3)
    server.rate_limit, server.rate_window = 1, 30
    connector.SOURCE.walk(conn, ROOT, None)  # Remaining 0: recorded
    until = state.blocked_until(conn)
    assert until is not None and 25 < until.timestamp() - time.time() <= 31
    with pytest.raises(Delay) as caught:
        connector.SOURCE.walk(conn, ROOT, None)
    assert 25 < caught.value.until - time.time() <= 31
