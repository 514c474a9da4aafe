"""Notion: pages shared with the integration, each page's blocks rendered to markdown.

Protocol (``Notion-Version: 2022-06-28``, ``Authorization: Bearer <api_token>``):

* listing: ``POST /v1/search`` with ``filter: {property: object, value: page}``, 100 a page,
  following ``next_cursor`` while ``has_more``. Archived and trashed pages are not listed.
  With ``root_page_ids`` only those pages and their descendants are listed; ancestry comes
  from each page's ``parent``, looked up (``GET /v1/pages|databases|blocks/{id}``) when
  the parent is not itself in the listing.
* removal: search "is not guaranteed to return everything" and recently shared pages may
  not be indexed yet (https://developers.notion.com/reference/search-optimizations-and-limitations),
  so the listing is not a snapshot (``removal_needs_proof``): a known page search did not
  return is discarded only when ``GET /v1/pages/{id}`` answers 404 ``object_not_found``
  (deleted or unshared), ``archived``/``in_trash``, or (with ``root_page_ids``) a page no
  longer under a root (:meth:`NotionProvider.confirm_gone`).
* errors (https://developers.notion.com/reference/status-codes): 429 ``rate_limited`` and
  529 ``service_overload`` / 503 with ``Retry-After`` wait until then (``shared.http``).
* document: ``GET /v1/pages/{id}`` for the title, then ``GET /v1/blocks/{id}/children``
  (cursor pagination) recursively into every block with ``has_children``, except child
  pages and databases, which become a link line and are documents of their own; the blocks
  are rendered to markdown by :mod:`.notion_blocks`.

Settings: ``api_token`` (or ``access_token`` for an OAuth connection), optional
``root_page_ids`` (a list, or a comma-separated string).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import closing
from datetime import datetime
from typing import Any

from services.connectors.base import (
    FetchedDocument,
    ListedDocument,
    Listing,
    SourceConfig,
)
from services.connectors.notion_blocks import (
    CHILDREN,
    LINKED_TYPES,
    Block,
    notion_id,
    page_title,
    render_blocks,
)
from shared.errors import Retryable, Unrecoverable
from shared.http import JsonClient, NotFound

DEFAULT_BASE_URL = "https://api.notion.com"
NOTION_VERSION = "2022-06-28"
PAGE_SIZE = 100


def default_base_url(settings: Mapping[str, Any]) -> str:
    """Notion has one API host whatever the workspace."""
    return DEFAULT_BASE_URL


class NotionProvider:
    """Lists a Notion workspace's shared pages and renders one page to markdown."""

    source_types: tuple[str, ...] = ("notion",)
    fetches_documents: bool = True

    def list_source(self, config: SourceConfig) -> Listing:
        with closing(_client(config)) as client:
            pages = _unique(_search_pages(client))
            roots = _id_list(config.settings.get("root_page_ids"))
            if roots:
                ancestry = _Ancestry(client, pages)
                pages = [page for page in pages if ancestry.reaches(page, roots)]
            return Listing(documents=[_listed(page) for page in pages], removal_needs_proof=True)

    def search_page(
        self, config: SourceConfig, cursor: str | None
    ) -> tuple[list[ListedDocument], str | None]:
        """One page of :meth:`list_source`'s search (from ``cursor``; None: the first) and
        the cursor of the next one (None after the last), so a long listing can resume
        after a rate limit. Pages outside ``root_page_ids`` are left out (their ancestry
        looked up as needed); a page repeated across pages is listed twice (callers key by
        identifier). Not a complete listing either: removal still needs
        :meth:`confirm_gone`."""
        payload: dict[str, Any] = {
            "filter": {"property": "object", "value": "page"},
            "page_size": PAGE_SIZE,
        }
        if cursor:
            payload["start_cursor"] = cursor
        with closing(_client(config)) as client:
            body = client.post("/v1/search", payload)
            results = body.get("results")
            if not isinstance(results, list):
                raise Retryable("POST /v1/search: an answer without results")
            pages = [r for r in results if r.get("object") == "page" and not _is_gone(r)]
            roots = _id_list(config.settings.get("root_page_ids"))
            if roots:
                ancestry = _Ancestry(client, pages)
                pages = [page for page in pages if ancestry.reaches(page, roots)]
            return [_listed(page) for page in pages], _next_cursor(body, "POST /v1/search")

    def confirm_gone(self, config: SourceConfig, identifiers: Sequence[str]) -> frozenset[str]:
        """The pages among ``identifiers`` that Notion says are gone: 404 (deleted or no
        longer shared), archived or in the trash, or no longer under ``root_page_ids``."""
        gone: set[str] = set()
        roots = _id_list(config.settings.get("root_page_ids"))
        with closing(_client(config)) as client:
            ancestry = _Ancestry(client, [])
            for identifier in identifiers:
                try:
                    page = client.get(f"/v1/pages/{identifier}")
                except NotFound:
                    gone.add(identifier)
                    continue
                if _is_gone(page) or (roots and not ancestry.reaches(page, roots)):
                    gone.add(identifier)
        return frozenset(gone)

    def fetch_document(self, config: SourceConfig, identifier: str) -> FetchedDocument | None:
        with closing(_client(config)) as client:
            try:
                page = client.get(f"/v1/pages/{identifier}")
                if _is_gone(page):
                    return None
                blocks = _children(client, identifier)
            except NotFound:
                return None
            return FetchedDocument(
                title=page_title(page),
                content=render_blocks(blocks),
                url=page.get("url"),
                updated_at=_timestamp(page.get("last_edited_time")),
            )


def _client(config: SourceConfig) -> JsonClient:
    token = config.settings.get("api_token") or config.settings.get("access_token")
    if not token:
        raise Unrecoverable(f"notion source {config.source_id}: no api_token configured")
    headers = {"Authorization": f"Bearer {token}", "Notion-Version": NOTION_VERSION}
    return JsonClient(config.base_url, headers=headers, timeout=config.timeout)


# -- listing --------------------------------------------------------------------------------


def _search_pages(client: JsonClient) -> Iterator[dict[str, Any]]:
    cursor: str | None = None
    while True:
        payload: dict[str, Any] = {
            "filter": {"property": "object", "value": "page"},
            "page_size": PAGE_SIZE,
        }
        if cursor:
            payload["start_cursor"] = cursor
        body = client.post("/v1/search", payload)
        for result in body.get("results", []):
            if result.get("object") == "page" and not _is_gone(result):
                yield result
        cursor = _next_cursor(body, "POST /v1/search")
        if cursor is None:
            return


def _next_cursor(body: Mapping[str, Any], what: str) -> str | None:
    if not body.get("has_more"):
        return None
    cursor = body.get("next_cursor")
    if not cursor:
        raise Retryable(f"{what}: has_more without next_cursor")
    return str(cursor)


def _unique(pages: Iterator[dict[str, Any]]) -> list[dict[str, Any]]:
    """Search may repeat a page across result pages when it is edited meanwhile."""
    seen: dict[str, dict[str, Any]] = {}
    for page in pages:
        seen.setdefault(notion_id(page["id"]), page)
    return list(seen.values())


def _listed(page: Mapping[str, Any]) -> ListedDocument:
    return ListedDocument(
        identifier=str(page["id"]),
        title=page_title(page),
        url=page.get("url"),
        updated_at=_timestamp(page.get("last_edited_time")),
    )


class _Ancestry:
    """Answers "is this page under one of the roots?", looking parents up at most once."""

    def __init__(self, client: JsonClient, pages: Sequence[Mapping[str, Any]]) -> None:
        self.client = client
        self.parents: dict[tuple[str, str], tuple[str, str] | None] = {
            ("page", notion_id(page["id"])): _parent_ref(page) for page in pages
        }
        self.answers: dict[tuple[str, str], bool] = {}

    def reaches(self, page: Mapping[str, Any], roots: frozenset[str]) -> bool:
        path: list[tuple[str, str]] = []
        node: tuple[str, str] | None = ("page", notion_id(page["id"]))
        answer = False
        while node is not None:
            if node in self.answers:
                answer = self.answers[node]
                break
            if node[1] in roots:
                answer = True
                break
            if node in path:
                break
            path.append(node)
            node = self._parent(node)
        for visited in path:
            self.answers[visited] = answer
        return answer

    def _parent(self, node: tuple[str, str]) -> tuple[str, str] | None:
        if node not in self.parents:
            kind, ident = node
            try:
                self.parents[node] = _parent_ref(self.client.get(f"/v1/{kind}s/{ident}"))
            except NotFound:
                self.parents[node] = None
        return self.parents[node]


def _parent_ref(obj: Mapping[str, Any]) -> tuple[str, str] | None:
    parent = obj.get("parent") or {}
    kind = parent.get("type")
    if kind in ("page_id", "database_id", "block_id") and parent.get(kind):
        return (kind.removesuffix("_id"), notion_id(parent[kind]))
    return None


def _id_list(value: Any) -> frozenset[str]:
    if not value:
        return frozenset()
    items = value.split(",") if isinstance(value, str) else value
    return frozenset(notion_id(str(item)) for item in items if str(item).strip())


def _is_gone(obj: Mapping[str, Any]) -> bool:
    return bool(obj.get("archived") or obj.get("in_trash"))


def _timestamp(value: Any) -> datetime | None:
    return datetime.fromisoformat(value) if isinstance(value, str) and value else None


# -- document ------------------------------------------------------------------------------


def _children(client: JsonClient, block_id: str, nested: bool = False) -> list[Block]:
    """A block's children, each with its own children fetched under ``CHILDREN``."""
    blocks: list[Block] = []
    cursor: str | None = None
    path = f"/v1/blocks/{block_id}/children"
    while True:
        params: dict[str, Any] = {"page_size": PAGE_SIZE}
        if cursor:
            params["start_cursor"] = cursor
        try:
            body = client.get(path, **params)
        except NotFound as exc:
            if not nested:
                raise
            raise Retryable(f"GET {path}: block removed while the page was read") from exc
        for block in body.get("results", []):
            if _is_gone(block):
                continue
            if block.get("has_children") and block.get("type") not in LINKED_TYPES:
                block = {**block, CHILDREN: _children(client, block["id"], nested=True)}
            blocks.append(block)
        cursor = _next_cursor(body, f"GET {path}")
        if cursor is None:
            return blocks
