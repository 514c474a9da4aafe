"""Scribe: Scribe Documents (step-by-step guides) and Knowledge Pages, rendered to markdown.

Protocol: Scribe's Search & Retrieval API (OpenAPI 3.1, https://public-api.scribehow.com,
reference https://public-api.scribehow.com/schema/redoc/, schema
https://public-api.scribehow.com/public-api/schema/download/):

Authentication
  ``X-API-Key: <api_key>`` on every request; 401 ``{"detail": "Invalid API key."}``, 403
  when the plan has no Public API access (both ``Unrecoverable``).
Listing
  ``GET /v1/documents/?limit=100&offset=<n>`` (at most 100 a page, newest first) answers
  ``{"count", "next", "previous", "results": [{"id" (uuid), "name", "link", "type"
  ("scribe" | "page"), "updated_at", ...}]}``. The client follows ``next`` (kept on the
  configured host) and ends when it is null. The listing is complete only when every page
  had that shape, ``count`` did not change between pages and the distinct documents seen
  add up to it (a document created or deleted while paging shifts the offsets); otherwise
  it is returned incomplete, so nothing is removed. An answer of any other shape (an error
  page, another API's ``{data, total}``) raises ``Retryable``: it never reads as an empty,
  complete listing that would discard every document.
Document
  ``GET /v1/documents/{id}/`` answers the document with ``description`` and, for a Scribe
  Document, ``actions: [{"id", "description", "screenshot_url"}]`` (a numbered list, each
  screenshot an image); for a Knowledge Page, ``content`` in Editor.js JSON
  (``{"blocks": [{"type", "data"}]}``, rendered by :func:`render_editorjs`). 404 means gone.
Rate limits
  60 requests a minute per key on the document endpoints; 429 (with ``Retry-After``, as
  Django REST framework throttling sends it) becomes a ``Delay``. Seed 000's document
  window for Scribe (50 a minute per organization data source) stays under it.

Session-token sources
  A source configured with ``settings["session_token"]`` and no ``api_key`` (the legacy
  browser-session connection) is not synced natively, and nothing of it may change:
  ``list_source`` returns an empty *incomplete* listing without any request, so nothing is
  removed and no document is re-fetched; ``fetch_document`` raises
  :class:`SessionTokenSource` (a ``LeaveUntouched``) rather than return None (which would
  discard the document) or content (which would replace it).

Settings: ``api_key``, or ``session_token`` (no-op as above).
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import closing
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from services.connectors.base import (
    FetchedDocument,
    LeaveUntouched,
    ListedDocument,
    Listing,
    SourceConfig,
)
from shared.errors import Retryable, Unrecoverable
from shared.http import JsonClient, NotFound

DEFAULT_BASE_URL = "https://public-api.scribehow.com"
LIST_PATH = "/v1/documents/"
PAGE_LIMIT = 100
#: A listing longer than this many pages is a server that never ends its ``next`` chain.
MAX_PAGES = 10_000


class SessionTokenSource(LeaveUntouched):
    """The source is connected with a session token, which the native sync leaves alone."""


def default_base_url(settings: Mapping[str, Any]) -> str:
    return DEFAULT_BASE_URL


def uses_session_token(settings: Mapping[str, Any]) -> bool:
    """True for a session-token source (no API key): its sync is a no-op."""
    return bool(settings.get("session_token")) and not settings.get("api_key")


class ScribeProvider:
    """Lists an organization's Scribe documents and renders one to markdown."""

    source_types: tuple[str, ...] = ("scribe",)
    fetches_documents: bool = True

    def list_source(self, config: SourceConfig) -> Listing:
        if uses_session_token(config.settings):
            return Listing(documents=[], complete=False)
        documents: dict[str, ListedDocument] = {}
        counts: set[int] = set()
        with closing(_client(config)) as client:
            url: str | None = LIST_PATH
            params: dict[str, Any] | None = {"limit": PAGE_LIMIT, "offset": 0}
            for _ in range(MAX_PAGES):
                if url is None:
                    break
                body = client.get(url, **(params or {}))
                results, count, following = _page(body, url)
                counts.add(count)
                for item in results:
                    listed = _listed(item)
                    documents.setdefault(listed.identifier, listed)
                url = _same_origin(client.base_url, following) if following else None
                params = None
            else:
                raise Retryable(f"scribe: {LIST_PATH} did not end after {MAX_PAGES} pages")
        consistent = len(counts) == 1 and len(documents) == next(iter(counts))
        return Listing(documents=list(documents.values()), complete=consistent)

    def fetch_document(self, config: SourceConfig, identifier: str) -> FetchedDocument | None:
        if uses_session_token(config.settings):
            raise SessionTokenSource(
                f"scribe source {config.source_id} uses a session token: not synced natively"
            )
        with closing(_client(config)) as client:
            try:
                document = client.get(f"{LIST_PATH}{identifier}/")
            except NotFound:
                return None
        if not isinstance(document, dict) or not document.get("id"):
            raise Retryable(f"scribe: GET {LIST_PATH}{identifier}/: not a document")
        return FetchedDocument(
            title=str(document.get("name") or "Untitled"),
            content=render_document(document),
            url=document.get("link"),
            updated_at=_timestamp(document.get("updated_at")),
        )


def _client(config: SourceConfig) -> JsonClient:
    key = config.settings.get("api_key")
    if not key:
        raise Unrecoverable(f"scribe source {config.source_id}: no api_key configured")
    headers = {"X-API-Key": str(key), "Accept": "application/json"}
    return JsonClient(config.base_url, headers=headers, timeout=config.timeout)


def _page(body: Any, url: str) -> tuple[list[Mapping[str, Any]], int, str | None]:
    """``(results, count, next)`` of a list page; ``Retryable`` for any other shape."""
    results = body.get("results") if isinstance(body, dict) else None
    count = body.get("count") if isinstance(body, dict) else None
    following = body.get("next") if isinstance(body, dict) else None
    if (
        not isinstance(results, list)
        or not isinstance(count, int)
        or isinstance(count, bool)
        or not all(isinstance(item, dict) and item.get("id") for item in results)
        or not (following is None or isinstance(following, str))
    ):
        raise Retryable(f"scribe: GET {url}: not a documents page ({str(body)[:120]!r})")
    return results, count, following or None


def _same_origin(base_url: str, url: str) -> str:
    """A ``next`` URL re-rooted on the configured host, so the key goes nowhere else."""
    base, target = urlsplit(base_url), urlsplit(url)
    query = f"?{target.query}" if target.query else ""
    return f"{base.scheme}://{base.netloc}{target.path}{query}"


def _listed(item: Mapping[str, Any]) -> ListedDocument:
    return ListedDocument(
        identifier=str(item["id"]),
        title=str(item.get("name") or "Untitled"),
        url=item.get("link"),
        updated_at=_timestamp(item.get("updated_at")),
    )


def _timestamp(value: Any) -> datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


# -- rendering ------------------------------------------------------------------------------


def render_document(document: Mapping[str, Any]) -> str:
    """The description, then a Scribe Document's actions or a Knowledge Page's content."""
    parts: list[str] = []
    description = str(document.get("description") or "").strip()
    if description:
        parts.append(description)
    if document.get("type") == "page":
        parts.append(render_editorjs(document.get("content")))
    else:
        parts += [
            _step(number, action)
            for number, action in enumerate(document.get("actions") or [], start=1)
            if isinstance(action, Mapping)
        ]
    return "\n\n".join(part for part in parts if part)


def _step(number: int, action: Mapping[str, Any]) -> str:
    marker = f"{number}. "
    pad = " " * len(marker)
    text = _inline(action.get("description")) or f"Step {number}"
    lines = text.split("\n")
    item = marker + "\n".join([lines[0], *[pad + line if line else "" for line in lines[1:]]])
    screenshot = action.get("screenshot_url")
    if screenshot:
        item += f"\n\n{pad}![Step {number}]({screenshot})"
    return item


def _inline(value: Any) -> str:
    """Editor.js inline HTML (``<b>``, ``<i>``, ``<a>``, ``<code>``) as markdown."""
    text = str(value or "")
    if "<" not in text and "&" not in text:
        return text.strip()
    from markdownify import markdownify  # bs4 with it: loaded by a process that converts

    return str(markdownify(f"<span>{text}</span>", heading_style="ATX")).strip()


def render_editorjs(content: Any) -> str:
    """Editor.js output (``{"blocks": [{"type", "data"}, ...]}``, https://editorjs.io/base-concepts/)
    as markdown: paragraph, header, list (nested), checklist, quote, code, delimiter, table,
    image, warning; an unknown block's ``text`` is kept as a paragraph."""
    blocks = content.get("blocks") if isinstance(content, Mapping) else None
    rendered = [_block(block) for block in blocks or [] if isinstance(block, Mapping)]
    return "\n\n".join(part for part in rendered if part)


def _block(block: Mapping[str, Any]) -> str:
    kind, data = block.get("type"), block.get("data") or {}
    if not isinstance(data, Mapping):
        return ""
    if kind == "header":
        level = min(max(int(data.get("level") or 2), 1), 6)
        return f"{'#' * level} {_inline(data.get('text'))}"
    if kind == "list":
        ordered = data.get("style") == "ordered"
        return "\n".join(_list_items(data.get("items") or [], ordered, 0))
    if kind == "checklist":
        return "\n".join(
            f"- [{'x' if item.get('checked') else ' '}] {_inline(item.get('text'))}"
            for item in data.get("items") or []
            if isinstance(item, Mapping)
        )
    if kind == "quote":
        quoted = "\n".join(f"> {line}" for line in _inline(data.get("text")).split("\n"))
        caption = _inline(data.get("caption"))
        return quoted + (f"\n>\n> — {caption}" if caption else "")
    if kind == "code":
        return f"```\n{data.get('code') or ''}\n```"
    if kind == "delimiter":
        return "---"
    if kind == "table":
        return _table(data)
    if kind == "image":
        file = data.get("file")
        url = (file.get("url") if isinstance(file, Mapping) else None) or data.get("url")
        return f"![{_inline(data.get('caption'))}]({url})" if url else ""
    if kind == "warning":
        return f"> **{_inline(data.get('title')) or 'Warning'}:** {_inline(data.get('message'))}"
    return _inline(data.get("text"))


def _list_items(items: Any, ordered: bool, depth: int) -> list[str]:
    lines: list[str] = []
    for number, item in enumerate(items if isinstance(items, list) else [], start=1):
        if isinstance(item, Mapping):  # nested list (editorjs/nested-list, list v2)
            text, children = _inline(item.get("content")), item.get("items") or []
        else:
            text, children = _inline(item), []
        marker = f"{number}." if ordered else "-"
        lines.append(f"{'   ' * depth}{marker} {text}")
        lines += _list_items(children, ordered, depth + 1)
    return lines


def _table(data: Mapping[str, Any]) -> str:
    rows = [
        [_inline(cell).replace("|", "\\|").replace("\n", " ") for cell in row]
        for row in data.get("content") or []
        if isinstance(row, list)
    ]
    if not rows:
        return ""
    width = max(len(row) for row in rows)
    rows = [row + [""] * (width - len(row)) for row in rows]
    header = rows[0] if data.get("withHeadings") else [""] * width
    body = rows[1:] if data.get("withHeadings") else rows
    lines = ["| " + " | ".join(header) + " |", "|" + " --- |" * width]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in body])
