"""SharePoint: the Graph fake driven by msgraph-sdk, then the connector against the fake
(delta walks, content through the 302, throttling)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest
import redis
from kiota_abstractions.authentication import (
    AccessTokenProvider,
    AllowedHostsValidator,
    BaseBearerTokenAuthenticationProvider,
)
from msgraph import GraphRequestAdapter, GraphServiceClient
from msgraph.generated.models.o_data_errors.o_data_error import ODataError

from services.connectors import sharepoint as connector
from services.connectors.nodes import Connection, NodeRef, RateLimitState
from shared.errors import Delay, JobError, Unrecoverable
from testkit.fakes.protocol_server import TRANSIENT_FAILURES
from testkit.fakes.sharepoint_server import SharepointServer

TOKEN = "eyJ0eXAi.fake"
SITE = "contoso.sharepoint.com,1111,2222"
DRIVE = "b!drive1"
ROOT = NodeRef("SharepointDrive", DRIVE)

#: kiota's own deprecation, raised inside msgraph-sdk's generated builders
pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


class StaticToken(AccessTokenProvider):  # type: ignore[misc]
    """A fixed bearer token (the SDK's Azure credentials need a tenant)."""

    async def get_authorization_token(
        self, uri: str, additional_authentication_context: dict[str, Any] | None = None
    ) -> str:
        return TOKEN

    def get_allowed_hosts_validator(self) -> AllowedHostsValidator:
        return AllowedHostsValidator([])


@pytest.fixture
def server() -> Iterator[SharepointServer]:
    fake = SharepointServer(TOKEN)
    with fake:
        yield fake


@pytest.fixture
def conn(server: SharepointServer) -> Connection:
    return Connection(
        source="sharepoint",
        connection_id=51,
        organization_id=5,
        base_url=server.base_url,
        credentials={"access_token": TOKEN},
        settings={"sites": [SITE], "page_size": 100},
        timeout=2.0,
    )


def walk_all(
    conn: Connection, root: NodeRef, since: str | None = None
) -> tuple[list[NodeRef], str | None]:
    refs: list[NodeRef] = []
    checkpoint: str | None = None
    while True:
        page = connector.SOURCE.walk(conn, root, checkpoint, since)
        refs += page.refs
        checkpoint = page.checkpoint
        if checkpoint is None:
            return refs, page.watermark


# -- the fake, as msgraph-sdk sees it ------------------------------------------------------


def test_msgraph_sdk_lists_drives_follows_delta_links_and_downloads(
    server: SharepointServer,
) -> None:
    items = server.populate(SITE, DRIVE, files=250)

    async def scenario() -> None:
        adapter = GraphRequestAdapter(BaseBearerTokenAuthenticationProvider(StaticToken()))
        adapter.base_url = f"{server.base_url}/v1.0"
        client = GraphServiceClient(request_adapter=adapter)
        drives = await client.sites.by_site_id(SITE).drives.get()
        assert drives is not None and [d.id for d in drives.value or []] == [DRIVE]

        delta = client.drives.by_drive_id(DRIVE).items.by_drive_item_id("root").delta
        page = await delta.get()
        names: list[str] = []
        while page is not None:
            names += [i.name for i in page.value or [] if i.file is not None and i.name]
            if page.odata_next_link is None:
                break
            page = await delta.with_url(page.odata_next_link).get()
        assert page is not None and page.odata_delta_link is not None
        assert names == [i.name for i in items]

        server.touch(items[5].id, "changed")
        server.remove(items[6].id)
        changes = await delta.with_url(page.odata_delta_link).get()
        assert changes is not None
        assert [(i.id, i.deleted is not None) for i in changes.value or []] == [
            (items[5].id, False),
            (items[6].id, True),
        ]

        item = client.drives.by_drive_id(DRIVE).items.by_drive_item_id(items[5].id)
        assert await item.content.get() == b"changed"  # through the 302
        with pytest.raises(ODataError) as missing:
            await client.drives.by_drive_id(DRIVE).items.by_drive_item_id("nope").get()
        assert missing.value.response_status_code == 404
        assert missing.value.error is not None and missing.value.error.code == "itemNotFound"

    asyncio.run(scenario())


# -- the connector ------------------------------------------------------------------------


def test_list_roots_from_sites(server: SharepointServer, conn: Connection) -> None:
    server.populate(SITE, DRIVE, files=1)
    server.populate(SITE, "b!drive2", files=1)
    assert connector.SOURCE.list_roots(conn) == [ROOT, NodeRef("SharepointDrive", "b!drive2")]
    with pytest.raises(Unrecoverable, match="no sites"):
        connector.SOURCE.list_roots(replace(conn, settings={}))


def test_delta_walk_then_only_changes(server: SharepointServer, conn: Connection) -> None:
    items = server.populate(SITE, DRIVE, files=230)
    server.populate(SITE, "b!other", files=3)
    refs, watermark = walk_all(conn, ROOT)
    assert [r.node_id for r in refs] == [f"{DRIVE}/{i.id}" for i in items]  # no folder
    assert watermark is not None and "token=" in watermark

    server.touch(items[1].id, "edited")
    server.remove(items[2].id)
    changed, again = walk_all(conn, ROOT, since=watermark)
    assert [r.node_id for r in changed] == [f"{DRIVE}/{items[1].id}", f"{DRIVE}/{items[2].id}"]
    node = connector.SOURCE.fetch(conn, changed[0])
    assert node is not None and node.text == "edited" and node.title == "note-1.txt"
    assert connector.SOURCE.fetch(conn, changed[1]) is None
    assert walk_all(conn, ROOT, since=again)[0] == []


def test_fetch_reads_text_and_names_binaries(server: SharepointServer, conn: Connection) -> None:
    text = server.add(SITE, DRIVE, "readme.md", "# Read me", mime_type="text/markdown")
    deck = server.add(
        SITE,
        DRIVE,
        "deck.pptx",
        "PK...",
        mime_type="application/vnd.openxmlformats-officedocument.presentationml.presentation",
    )
    node = connector.SOURCE.fetch(conn, NodeRef("SharepointFile", f"{DRIVE}/{text.id}"))
    assert node is not None and node.text == "# Read me"
    assert node.synchronization_date.timestamp() == text.modified
    binary = connector.SOURCE.fetch(conn, NodeRef("SharepointFile", f"{DRIVE}/{deck.id}"))
    assert binary is not None and binary.text == "deck.pptx"
    assert server.requests_to(f"/v1.0/drives/{DRIVE}/items/{deck.id}/content") == []


def test_a_link_to_another_host_is_refused(server: SharepointServer, conn: Connection) -> None:
    server.populate(SITE, DRIVE, files=1)
    with pytest.raises(Unrecoverable, match="refused"):
        connector.SOURCE.walk(conn, ROOT, "https://evil.example/v1.0/drives/x/root/delta")


def test_bad_credentials_are_unrecoverable(server: SharepointServer, conn: Connection) -> None:
    server.populate(SITE, DRIVE, files=1)
    with pytest.raises(Unrecoverable, match="401"):
        connector.SOURCE.walk(replace(conn, credentials={"access_token": "x"}), ROOT, None)
    with pytest.raises(Unrecoverable, match="no access_token"):
        connector.SOURCE.walk(replace(conn, credentials={}), ROOT, None)


@pytest.mark.parametrize(
    ("kind", "options", "error"),
    [*[case[1:] for case in TRANSIENT_FAILURES], ("503", {"retry_after": 20}, Delay)],
    ids=[*[case[0] for case in TRANSIENT_FAILURES], "503-retry-after"],
)
def test_transient_failures(
    server: SharepointServer,
    conn: Connection,
    kind: str,
    options: dict[str, Any],
    error: type[JobError],
) -> None:
    server.populate(SITE, DRIVE, files=3)
    server.fail(f"/v1.0/drives/{DRIVE}/root/delta", kind, **options)
    with pytest.raises(error):
        connector.SOURCE.walk(conn, ROOT, None)
    assert len(connector.SOURCE.walk(conn, ROOT, None).refs) == 3


def test_throttling_headers_and_429_block_the_connection(
    server: SharepointServer, conn: Connection, redis_client: redis.Redis, namespace: str
) -> None:
    state = RateLimitState(redis_client, namespace)
    conn = replace(conn, rate_limits=state)
    items = server.populate(SITE, DRIVE, files=2)
    server.rate_limit, server.rate_window = 2, 60
    ref = NodeRef("SharepointFile", f"{DRIVE}/{items[0].id}")
    # the item (1 of 2), the content (2 of 2: RateLimit-Remaining 0 recorded)
    assert connector.SOURCE.fetch(conn, ref) is not None
    until = state.blocked_until(conn)
    assert until is not None and 50 < until.timestamp() - time.time() <= 61
    with pytest.raises(Delay) as caught:  # the third: 429 Retry-After
        connector.SOURCE.fetch(conn, ref)
    assert 50 < caught.value.until - time.time() <= 61
