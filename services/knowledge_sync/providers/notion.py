"""Notion: pages shared with the integration, each page's blocks rendered to markdown.

Protocol (``Notion-Version: 2022-06-28``, ``Authorization: Bearer <api_token>``):

* listing: ``POST /v1/search`` with ``filter: {property: object, value: page}``, 100 a page,
  following ``next_cursor`` while ``has_more``. Archived and trashed pages are not listed.
  With ``root_page_ids`` only those pages and their descendants are listed; ancestry comes
  from each page's ``parent``, looked up (``GET /v1/pages|databases|blocks/{id}``) when
  the parent is not itself in the listing.
* document: ``GET /v1/pages/{id}`` for the title, then ``GET /v1/blocks/{id}/children``
  (cursor pagination) recursively into every block with ``has_children``, except child
  pages and databases, which become a link line and are documents of their own.

Settings: ``api_token`` (or ``access_token`` for an OAuth connection), optional
``root_page_ids`` (a list, or a comma-separated string).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import closing
from datetime import datetime
from typing import Any

from services.knowledge_sync.providers.base import (
    FetchedDocument,
    ListedDocument,
    Listing,
    SourceConfig,
)
from shared.errors import Retryable, Unrecoverable
from shared.http import JsonClient, NotFound

DEFAULT_BASE_URL = "https://api.notion.com"
NOTION_VERSION = "2022-06-28"
PAGE_SIZE = 100
PAGE_URL = "https://www.notion.so/{id}"

Block = dict[str, Any]
#: Where a fetched block keeps its fetched children (Notion's own JSON has no such key).
CHILDREN = "_children"
#: Blocks whose children are documents of their own: linked, never inlined.
LINKED_TYPES = frozenset({"child_page", "child_database"})
#: List-like blocks by the list they continue: consecutive items of one list stay tight.
LIST_FAMILIES = {
    "bulleted_list_item": "bullet",
    "to_do": "bullet",
    "toggle": "bullet",
    "numbered_list_item": "ordered",
}


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
            return Listing(documents=[_listed(page) for page in pages])

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
        seen.setdefault(_norm(page["id"]), page)
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
            ("page", _norm(page["id"])): _parent_ref(page) for page in pages
        }
        self.answers: dict[tuple[str, str], bool] = {}

    def reaches(self, page: Mapping[str, Any], roots: frozenset[str]) -> bool:
        path: list[tuple[str, str]] = []
        node: tuple[str, str] | None = ("page", _norm(page["id"]))
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
        return (kind.removesuffix("_id"), _norm(parent[kind]))
    return None


def _id_list(value: Any) -> frozenset[str]:
    if not value:
        return frozenset()
    items = value.split(",") if isinstance(value, str) else value
    return frozenset(_norm(str(item)) for item in items if str(item).strip())


def _norm(identifier: str) -> str:
    """Notion accepts ids with or without dashes; compare them without."""
    return identifier.strip().replace("-", "").lower()


def _is_gone(obj: Mapping[str, Any]) -> bool:
    return bool(obj.get("archived") or obj.get("in_trash"))


def _timestamp(value: Any) -> datetime | None:
    return datetime.fromisoformat(value) if isinstance(value, str) and value else None


def page_title(page: Mapping[str, Any]) -> str:
    """The text of the page's title property (whatever a database names it)."""
    for prop in (page.get("properties") or {}).values():
        if isinstance(prop, Mapping) and prop.get("type") == "title":
            title = plain_text(prop.get("title") or []).strip()
            if title:
                return title
    return "Untitled"


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


# -- markdown ------------------------------------------------------------------------------


def render_blocks(blocks: Sequence[Block]) -> str:
    """Blocks as markdown: blank lines between blocks, list items kept tight."""
    out: list[str] = []
    previous: str | None = None  # the list family of the previous rendered block
    number = 0
    for block in blocks:
        kind = block.get("type", "")
        number = number + 1 if kind == "numbered_list_item" else 0
        text = render_block(block, number)
        if not text:
            continue
        family = LIST_FAMILIES.get(kind)
        if out:
            out.append("\n" if family is not None and family == previous else "\n\n")
        out.append(text)
        previous = family
    return "".join(out)


def render_block(block: Block, number: int = 1) -> str:
    """One block (with its fetched children) as markdown; "" for what has no text."""
    kind = block.get("type", "")
    data: Mapping[str, Any] = block.get(kind) or {}
    text = rich_text(data.get("rich_text") or [])
    children: Sequence[Block] = block.get(CHILDREN) or []
    inner = render_blocks(children)
    if inner and children[0].get("type") not in LIST_FAMILIES:
        inner = "\n" + inner  # a paragraph under an item is its own paragraph, not a run-on
    if kind.startswith("heading_") and kind[-1] in "123":
        return _join(f"{'#' * int(kind[-1])} {text}", inner)
    if kind == "bulleted_list_item":
        return _item("- ", text, inner)
    if kind == "numbered_list_item":
        return _item(f"{number}. ", text, inner)
    if kind == "to_do":
        return _item("- [x] " if data.get("checked") else "- [ ] ", text, inner, width=2)
    if kind == "toggle":
        return _item("- ", text, inner)
    if kind == "quote":
        return _quote(_join(text, inner))
    if kind == "callout":
        icon = (data.get("icon") or {}).get("emoji")
        return _quote(_join(f"{icon} {text}" if icon else text, inner))
    if kind == "code":
        return _join(_fence(data), rich_text(data.get("caption") or []))
    if kind == "divider":
        return "---"
    if kind == "table":
        return _table(block)
    if kind in LINKED_TYPES:
        return f"[{data.get('title') or 'Untitled'}]({page_url(block['id'])})"
    if kind == "equation":
        return f"$$\n{data.get('expression', '')}\n$$"
    if kind in ("image", "video", "file", "pdf", "audio"):
        return _media(kind, data)
    if kind in ("bookmark", "embed", "link_preview") and data.get("url"):
        label = plain_text(data.get("caption") or []) or data["url"]
        return f"[{label}]({data['url']})"
    return _join(text, inner)


def page_url(page_id: str) -> str:
    return PAGE_URL.format(id=_norm(page_id))


def _join(*parts: str) -> str:
    return "\n\n".join(part.strip("\n") for part in parts if part.strip("\n"))


def _item(marker: str, text: str, inner: str, width: int | None = None) -> str:
    """A list item whose continuation lines and children sit under its text."""
    body = f"{text}\n{inner}" if inner else text
    pad = " " * (len(marker) if width is None else width)
    lines = body.split("\n")
    return marker + "\n".join([lines[0], *[pad + line if line else "" for line in lines[1:]]])


def _quote(text: str) -> str:
    return "\n".join(f"> {line}" if line else ">" for line in text.split("\n"))


def _fence(data: Mapping[str, Any]) -> str:
    code = plain_text(data.get("rich_text") or [])
    language = str(data.get("language") or "")
    language = "" if language == "plain text" else language.replace(" ", "-")
    fence = "```"
    while fence in code:
        fence += "`"
    return f"{fence}{language}\n{code}\n{fence}"


def _table(block: Block) -> str:
    rows = [
        [_cell(cell) for cell in (row.get("table_row") or {}).get("cells") or []]
        for row in block.get(CHILDREN) or []
        if row.get("type") == "table_row"
    ]
    if not rows:
        return ""
    width = max(int((block.get("table") or {}).get("table_width") or 0), *map(len, rows))
    lines = [_row(row + [""] * (width - len(row))) for row in rows]
    lines.insert(1, _row(["---"] * width))
    return "\n".join(lines)


def _cell(cell: Sequence[Mapping[str, Any]]) -> str:
    return rich_text(cell).replace("|", "\\|").replace("\n", "<br>")


def _row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _media(kind: str, data: Mapping[str, Any]) -> str:
    source = data.get(data.get("type") or "") or {}
    url = source.get("url") if isinstance(source, Mapping) else None
    if not url:
        return ""
    label = plain_text(data.get("caption") or []) or data.get("name") or kind
    return f"![{label}]({url})" if kind == "image" else f"[{label}]({url})"


def plain_text(items: Sequence[Mapping[str, Any]]) -> str:
    return "".join(str(item.get("plain_text") or _content(item)) for item in items)


def rich_text(items: Sequence[Mapping[str, Any]]) -> str:
    """Rich text with its annotations (bold, italic, strikethrough, code) and links."""
    return "".join(_span(item) for item in items)


def _content(item: Mapping[str, Any]) -> str:
    return str((item.get("text") or {}).get("content") or "")


def _span(item: Mapping[str, Any]) -> str:
    if item.get("type") == "equation":
        return f"${(item.get('equation') or {}).get('expression', '')}$"
    content = str(item.get("plain_text") or _content(item))
    core = content.strip()
    if not core:
        return content
    lead = content[: len(content) - len(content.lstrip())]
    trail = content[len(content.rstrip()) :]
    notes = item.get("annotations") or {}
    if notes.get("code"):
        tick = "``" if "`" in core else "`"
        core = f"{tick}{core}{tick}" if tick == "`" else f"{tick} {core} {tick}"
    if notes.get("strikethrough"):
        core = f"~~{core}~~"
    if notes.get("italic"):
        core = f"*{core}*"
    if notes.get("bold"):
        core = f"**{core}**"
    href = item.get("href") or ((item.get("text") or {}).get("link") or {}).get("url")
    if href:
        core = f"[{core}]({href})"
    return f"{lead}{core}{trail}"
