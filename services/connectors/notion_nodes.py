"""Notion as a super source: the knowledge sync's Notion client behind the node contract.

A root is a Notion page or database; its indexable nodes are the pages shared with the
integration that descend from it. The walk is the knowledge-sync listing
(:class:`.notion.NotionProvider` with ``root_page_ids``: ``POST /v1/search`` and the
ancestry look-ups), one page of refs per call from an offset into the sorted listing; a
page's text is the same markdown rendering the knowledge sync stores. The listing carries
each page's ``last_edited_time``, so unchanged pages can be skipped before being fetched.
Notion sends no quota headers; its 429 with Retry-After is a ``Delay`` as everywhere.

Node ids are Notion ids: ``NotionPage`` / ``NotionDatabase`` roots, ``NotionPage`` nodes.
Credentials: ``api_token`` (or ``access_token``).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime

from services.connectors.base import SourceConfig
from services.connectors.nodes import Connection, Node, NodeRef, NodeSource, WalkPage
from services.connectors.notion import DEFAULT_BASE_URL, NotionProvider

PAGE = "NotionPage"
DATABASE = "NotionDatabase"
PAGE_SIZE = 500

_provider = NotionProvider()


class NotionNodeSource:
    """Pages under a Notion page or database."""

    source = "notion"
    root_node_types: tuple[str, ...] = (PAGE, DATABASE)
    indexable_node_types: tuple[str, ...] = (PAGE,)

    def list_roots(self, conn: Connection) -> list[NodeRef]:
        """Every page shared with the integration (a picker narrows them down)."""
        listing = _provider.list_source(_config(conn, roots=()))
        return [NodeRef(PAGE, d.identifier) for d in listing.documents]

    def walk(
        self, conn: Connection, root: NodeRef, checkpoint: str | None, since: str | None = None
    ) -> WalkPage:
        offset = _offset(checkpoint)
        listing = _provider.list_source(_config(conn, roots=(root.node_id,)))
        documents = sorted(listing.documents, key=lambda d: d.identifier)
        size = int(conn.settings.get("page_size") or PAGE_SIZE)
        chosen = documents[offset : offset + size]
        refs = [NodeRef(PAGE, d.identifier) for d in chosen]
        dates = {
            ref: d.updated_at
            for ref, d in zip(refs, chosen, strict=True)
            if d.updated_at is not None
        }
        if offset + size < len(documents):
            return WalkPage(refs, json.dumps({"offset": offset + size}), dates=dates)
        return WalkPage(refs, None, dates=dates)

    def fetch(self, conn: Connection, ref: NodeRef) -> Node | None:
        document = _provider.fetch_document(_config(conn, roots=()), ref.node_id)
        if document is None:
            return None
        return Node(
            ref=ref,
            title=document.title,
            text=document.content,
            url=document.url,
            synchronization_date=document.updated_at or datetime.now(UTC),
        )


SOURCE: NodeSource = NotionNodeSource()


def _config(conn: Connection, *, roots: tuple[str, ...]) -> SourceConfig:
    settings = {**conn.settings, **conn.credentials}
    settings["root_page_ids"] = list(roots)
    return SourceConfig(
        source_id=conn.connection_id,
        organization_id=conn.organization_id,
        source_type="notion",
        base_url=conn.base_url or DEFAULT_BASE_URL,
        settings=settings,
        timeout=conn.timeout,
    )


def _offset(checkpoint: str | None) -> int:
    if not checkpoint:
        return 0
    try:
        return max(0, int(json.loads(checkpoint)["offset"]))
    except (ValueError, KeyError, TypeError):
        return 0
