"""A local Notion API (version 2022-06-28): search, pages, blocks, databases.

The workspace is in memory. Pages are added with their content as Notion block JSON (the
helpers below build it; a block's ``children`` are stored as its children, the way
``PATCH /v1/blocks/{id}/children`` would). A page added under another page also appears in
its parent's content as a ``child_page`` block, as in Notion.

Endpoints: ``POST /v1/search`` (``filter.value`` page or database, ``start_cursor``,
``page_size``), ``GET /v1/pages/{id}``, ``GET /v1/databases/{id}``, ``GET /v1/blocks/{id}``,
``GET /v1/blocks/{id}/children``. Cursors are the id of the next result, as Notion's are;
``max_page_size`` caps every page below Notion's 100 to force many pages. Requests need
``Authorization: Bearer <token>`` (else 401 ``unauthorized``) and a ``Notion-Version``
header (else 400 ``missing_version``).

Search is not a complete enumeration in Notion ("Search is not guaranteed to return
everything", and newly shared pages may not be indexed yet); :meth:`NotionServer.hide_from_search`
keeps a live page out of search results while ``GET /v1/pages/{id}`` still answers it.

References: https://developers.notion.com/reference/post-search,
https://developers.notion.com/reference/search-optimizations-and-limitations,
https://developers.notion.com/reference/retrieve-a-page,
https://developers.notion.com/reference/get-block-children,
https://developers.notion.com/reference/pagination,
https://developers.notion.com/reference/status-codes (error bodies ``{object: error, status,
code, message}``; 429 ``rate_limited``, 503 ``service_unavailable``, 529 ``service_overload``
with Retry-After), https://developers.notion.com/reference/request-limits.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

from testkit.fakes.protocol_server import ProtocolServer, Reply, Request, iso

Block = dict[str, Any]
Span = str | dict[str, Any]

ERROR_CODES = {
    400: "validation_error",
    401: "unauthorized",
    404: "object_not_found",
    429: "rate_limited",
    500: "internal_server_error",
    503: "service_unavailable",
    529: "service_overload",
}


def _norm(identifier: str) -> str:
    return identifier.replace("-", "").lower()


class NotionServer(ProtocolServer):
    """Parameters:
    token: the integration token requests must carry.
    max_page_size: the most results one page returns (Notion: 100).
    """

    def __init__(self, token: str = "secret_notion", *, max_page_size: int = 100) -> None:
        super().__init__()
        self.token = token
        self.max_page_size = max_page_size
        self.pages: dict[str, dict[str, Any]] = {}
        self.databases: dict[str, dict[str, Any]] = {}
        self.blocks: dict[str, Block] = {}
        self.children: dict[str, list[str]] = {}
        self.unindexed: set[str] = set()
        self._clock = time.time() - 86_400

    # -- building the workspace ---------------------------------------------------------

    def add_page(
        self,
        title: str,
        blocks: Sequence[Block] = (),
        *,
        parent: str | None = None,
        database: str | None = None,
        archived: bool = False,
        in_trash: bool = False,
        page_id: str | None = None,
    ) -> str:
        """Add a page (under a page, a database, or the workspace); returns its id."""
        page_id = page_id or str(uuid.uuid4())
        parent_ref: dict[str, Any]
        if database is not None:
            parent_ref = {"type": "database_id", "database_id": database}
            properties = {"Name": {"id": "title", "type": "title", "title": [text(title)]}}
        elif parent is not None:
            parent_ref = {"type": "page_id", "page_id": parent}
            properties = {"title": {"id": "title", "type": "title", "title": [text(title)]}}
        else:
            parent_ref = {"type": "workspace", "workspace": True}
            properties = {"title": {"id": "title", "type": "title", "title": [text(title)]}}
        self._clock += 60
        self.pages[_norm(page_id)] = {
            "object": "page",
            "id": page_id,
            "created_time": iso(self._clock),
            "last_edited_time": iso(self._clock),
            "archived": archived,
            "in_trash": in_trash,
            "parent": parent_ref,
            "properties": properties,
            "url": f"https://www.notion.so/{title.replace(' ', '-')}-{_norm(page_id)}",
        }
        self.children[_norm(page_id)] = []
        self.append(page_id, blocks)
        if parent is not None:
            self._store(parent, {"type": "child_page", "child_page": {"title": title}}, page_id)
            self.blocks[_norm(page_id)]["has_children"] = bool(blocks)
        return page_id

    def add_database(self, title: str, *, parent: str | None = None) -> str:
        database_id = str(uuid.uuid4())
        parent_ref = (
            {"type": "page_id", "page_id": parent}
            if parent
            else {"type": "workspace", "workspace": True}
        )
        self.databases[_norm(database_id)] = {
            "object": "database",
            "id": database_id,
            "title": [text(title)],
            "parent": parent_ref,
            "archived": False,
        }
        if parent is not None:
            self._store(parent, {"type": "child_database", "child_database": {"title": title}})
        return database_id

    def append(self, parent_id: str, blocks: Iterable[Block]) -> list[str]:
        """Append blocks (with nested ``children``) to a page or block; returns their ids."""
        return [self._store(parent_id, block) for block in blocks]

    def _store(self, parent_id: str, spec: Block, block_id: str | None = None) -> str:
        block_id = block_id or str(uuid.uuid4())
        nested = spec.get("children") or []
        parent_key = _norm(parent_id)
        parent_type = "page_id" if parent_key in self.pages else "block_id"
        block = {k: v for k, v in spec.items() if k != "children"}
        block.update(
            object="block",
            id=block_id,
            parent={"type": parent_type, parent_type: parent_id},
            created_time=iso(self._clock),
            last_edited_time=iso(self._clock),
            archived=False,
            in_trash=False,
            has_children=bool(nested),
        )
        self.blocks[_norm(block_id)] = block
        self.children.setdefault(parent_key, []).append(block_id)
        self.children.setdefault(_norm(block_id), [])
        self.append(block_id, nested)
        return block_id

    def hide_from_search(self, page_id: str) -> None:
        """Keep a live page out of search results (not yet indexed, or missed by search)."""
        self.unindexed.add(_norm(page_id))

    def archive_page(self, page_id: str) -> None:
        """Move a page to the trash: it stays readable with ``in_trash`` (and ``archived``)."""
        page = self.pages[_norm(page_id)]
        page["archived"] = page["in_trash"] = True

    def remove_page(self, page_id: str) -> None:
        """Delete a page outright (or unshare it): every endpoint then answers 404."""
        key = _norm(page_id)
        self.pages.pop(key, None)
        self.blocks.pop(key, None)
        for siblings in self.children.values():
            siblings[:] = [i for i in siblings if _norm(i) != key]

    # -- protocol -----------------------------------------------------------------------

    def authorized(self, request: Request) -> bool:
        return request.headers.get("authorization") == f"Bearer {self.token}"

    def status_reply(self, status: int, message: str) -> Reply:
        code = ERROR_CODES.get(status, "internal_server_error")
        body = {"object": "error", "status": status, "code": code, "message": message}
        return Reply(status, body)

    def route(self, request: Request) -> Reply:
        if "notion-version" not in request.headers:
            body = {"object": "error", "status": 400, "code": "missing_version"}
            return Reply(400, {**body, "message": "Notion-Version header failed validation"})
        parts = [p for p in request.path.split("/") if p]
        if request.method == "POST" and parts == ["v1", "search"]:
            return self._search(request.body or {})
        if request.method != "GET" or len(parts) < 3 or parts[0] != "v1":
            return self.status_reply(400, f"invalid request URL {request.path}")
        kind, key = parts[1], _norm(parts[2])
        if kind == "pages" and len(parts) == 3 and key in self.pages:
            return Reply(200, self.pages[key])
        if kind == "databases" and len(parts) == 3 and key in self.databases:
            return Reply(200, self.databases[key])
        if kind == "blocks" and len(parts) == 3 and key in self.blocks:
            return Reply(200, self.blocks[key])
        if kind == "blocks" and parts[3:] == ["children"] and self._has_content(key):
            ids = self.children.get(key, [])
            size = request.param("page_size")
            return self._paginated(
                [self.blocks[_norm(i)] for i in ids],
                request.param("start_cursor"),
                int(size) if size else 100,
                "block",
            )
        return self.status_reply(404, f"Could not find {kind} with ID: {parts[2]}.")

    def _has_content(self, key: str) -> bool:
        page = self.pages.get(key)
        return key in self.blocks or (page is not None and not page["in_trash"])

    def _search(self, body: dict[str, Any]) -> Reply:
        wanted = (body.get("filter") or {}).get("value")
        results: list[dict[str, Any]] = []
        if wanted in (None, "page"):
            results += [p for k, p in self.pages.items() if k not in self.unindexed]
        if wanted in (None, "database"):
            results += list(self.databases.values())
        query = str(body.get("query") or "").lower()
        if query:
            results = [r for r in results if query in _title_of(r).lower()]
        return self._paginated(
            results, body.get("start_cursor"), int(body.get("page_size") or 100), "page_or_database"
        )

    def _paginated(
        self, items: Sequence[dict[str, Any]], cursor: str | None, size: int, kind: str
    ) -> Reply:
        if not 1 <= size <= 100:
            return self.status_reply(400, "body.page_size should be ≤ 100")
        size = min(size, self.max_page_size)
        start = 0
        if cursor:
            ids = [_norm(item["id"]) for item in items]
            if _norm(cursor) not in ids:
                return self.status_reply(400, "start_cursor should be a valid cursor")
            start = ids.index(_norm(cursor))
        chunk = list(items[start : start + size])
        more = start + size < len(items)
        return Reply(
            200,
            {
                "object": "list",
                "results": chunk,
                "next_cursor": items[start + size]["id"] if more else None,
                "has_more": more,
                "type": kind,
                kind: {},
            },
        )


def _title_of(obj: dict[str, Any]) -> str:
    if obj.get("object") == "database":
        return "".join(t["plain_text"] for t in obj.get("title", []))
    for prop in obj.get("properties", {}).values():
        if prop.get("type") == "title":
            return "".join(t["plain_text"] for t in prop["title"])
    return ""


# -- block builders (Notion's JSON) ------------------------------------------------------------


def text(
    content: str,
    *,
    bold: bool = False,
    italic: bool = False,
    code: bool = False,
    strikethrough: bool = False,
    link: str | None = None,
) -> dict[str, Any]:
    """One rich-text span."""
    return {
        "type": "text",
        "text": {"content": content, "link": {"url": link} if link else None},
        "annotations": {
            "bold": bold,
            "italic": italic,
            "strikethrough": strikethrough,
            "underline": False,
            "code": code,
            "color": "default",
        },
        "plain_text": content,
        "href": link,
    }


def _spans(spans: Sequence[Span]) -> list[dict[str, Any]]:
    return [text(s) if isinstance(s, str) else s for s in spans]


def _block(kind: str, data: dict[str, Any], children: Sequence[Block] = ()) -> Block:
    block: Block = {"type": kind, kind: data}
    if children:
        block["children"] = list(children)
    return block


def paragraph(*spans: Span, children: Sequence[Block] = ()) -> Block:
    return _block("paragraph", {"rich_text": _spans(spans), "color": "default"}, children)


def heading(level: int, *spans: Span, children: Sequence[Block] = ()) -> Block:
    data = {"rich_text": _spans(spans), "is_toggleable": bool(children), "color": "default"}
    return _block(f"heading_{level}", data, children)


def bulleted(*spans: Span, children: Sequence[Block] = ()) -> Block:
    return _block("bulleted_list_item", {"rich_text": _spans(spans)}, children)


def numbered(*spans: Span, children: Sequence[Block] = ()) -> Block:
    return _block("numbered_list_item", {"rich_text": _spans(spans)}, children)


def todo(*spans: Span, checked: bool = False, children: Sequence[Block] = ()) -> Block:
    return _block("to_do", {"rich_text": _spans(spans), "checked": checked}, children)


def toggle(*spans: Span, children: Sequence[Block] = ()) -> Block:
    return _block("toggle", {"rich_text": _spans(spans)}, children)


def quote(*spans: Span, children: Sequence[Block] = ()) -> Block:
    return _block("quote", {"rich_text": _spans(spans)}, children)


def callout(*spans: Span, emoji: str = "💡", children: Sequence[Block] = ()) -> Block:
    data = {"rich_text": _spans(spans), "icon": {"type": "emoji", "emoji": emoji}}
    return _block("callout", data, children)


def code(source: str, language: str = "plain text") -> Block:
    return _block("code", {"rich_text": [text(source)], "language": language, "caption": []})


def divider() -> Block:
    return _block("divider", {})


def table(rows: Sequence[Sequence[str]], *, header: bool = True) -> Block:
    width = max(len(row) for row in rows)
    cells = [
        _block("table_row", {"cells": [[text(cell)] if cell else [] for cell in row]})
        for row in rows
    ]
    data = {"table_width": width, "has_column_header": header, "has_row_header": False}
    return _block("table", data, cells)


def image(url: str, caption: str = "") -> Block:
    data = {"type": "external", "external": {"url": url}, "caption": _spans([caption])}
    return _block("image", data)


# -- a generated workspace --------------------------------------------------------------------


def varied_blocks(n: int, rng: random.Random) -> list[Block]:
    """Content that exercises every rendered block type, varied by ``n``."""
    blocks: list[Block] = [
        heading(1, f"Guide {n}"),
        paragraph("Intro for page ", text(str(n), bold=True), " with ", text("code", code=True)),
        heading(2, "Steps"),
        *[numbered(f"Step {i}") for i in range(1, rng.randint(2, 5))],
        bulleted("Parent", children=[bulleted("Child", children=[bulleted("Grandchild")])]),
        todo("Done", checked=True),
        todo("Open"),
        quote("Quoted ", text("text", italic=True)),
        callout("Note for ", text("page", link=f"https://example.com/{n}")),
        code(f"print({n})", "python"),
        divider(),
        heading(3, "Details"),
        toggle("More", children=[paragraph(f"Hidden detail {n}")]),
    ]
    if n % 2 == 0:
        blocks.append(table([["Key", "Value"], ["n", str(n)], ["half", str(n // 2)]]))
    if n % 3 == 0:
        blocks.append(image(f"https://example.com/{n}.png", f"Figure {n}"))
    return blocks


def populate(
    server: NotionServer, n_pages: int = 500, *, seed: int = 0, nest_every: int = 10
) -> list[str]:
    """Add ``n_pages`` pages of varied content; every ``nest_every``-th page after the
    first is a child of an earlier page. Returns the page ids in creation order."""
    rng = random.Random(seed)
    ids: list[str] = []
    for n in range(n_pages):
        parent = ids[rng.randrange(len(ids))] if ids and n % nest_every == 0 else None
        ids.append(server.add_page(f"Page {n}", varied_blocks(n, rng), parent=parent))
    return ids
