"""Scribe: step-by-step guides ("scribes") rendered to markdown, listed by offset.

Scribe's public API is thinly documented, so this module states the protocol it speaks (the
local fake in ``testkit/fakes/scribe_server.py`` implements the same):

Authentication
  ``X-API-Key: <api_key>`` on every request (the header Scribe's API-key access uses).
Listing
  ``GET /api/v1/scribes?offset=<n>&limit=100`` answers
  ``{"data": [{"id", "title", "url", "updated_at"}, ...], "total": <int>, ...}``.
  The next offset is ``offset + len(data)``. With ``total`` the listing ends once the offset
  reaches it (a server may cap ``limit``, so a short page alone does not end it); without
  ``total`` a short page ends it. An empty page always ends it. When the pages do not add
  up (``total`` changed between pages, or fewer distinct scribes than ``total``: the list
  shifted under the offsets) the listing is returned as incomplete, so nothing is removed.
Document
  ``GET /api/v1/scribes/{id}`` answers the scribe with ``description`` and ``steps``:
  ``[{"position", "kind", "text", "screenshot_url"}, ...]`` (``kind`` is ``step`` unless
  ``heading``, ``tip``, ``alert`` or ``note``). Steps become a numbered list with each
  screenshot as an image; a 404 means the scribe is gone (None).

Session-token sources
  A source configured with ``settings["session_token"]`` and no ``api_key`` (the legacy
  browser-session connection) is not synced natively, and nothing of it may change:
  ``list_source`` returns an empty *incomplete* listing without any request, so nothing is
  removed and no document is re-fetched; ``fetch_document`` raises
  :class:`SessionTokenSource` (a ``LeaveUntouched``) rather than return None (which would
  discard the document) or content (which would replace it). A run that checks
  :func:`uses_session_token` first, or catches :class:`SessionTokenSource`, completes
  the unit as a no-op.

Settings: ``api_key``, or ``session_token`` (no-op as above).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextlib import closing
from datetime import datetime
from typing import Any

from services.connectors.base import (
    FetchedDocument,
    LeaveUntouched,
    ListedDocument,
    Listing,
    SourceConfig,
)
from shared.errors import Unrecoverable
from shared.http import JsonClient, NotFound

DEFAULT_BASE_URL = "https://scribehow.com"
PAGE_LIMIT = 100
QUOTED_KINDS = {"tip": "Tip", "alert": "Alert", "note": "Note"}


class SessionTokenSource(LeaveUntouched):
    """The source is connected with a session token, which the native sync leaves alone."""


def default_base_url(settings: Mapping[str, Any]) -> str:
    return DEFAULT_BASE_URL


def uses_session_token(settings: Mapping[str, Any]) -> bool:
    """True for a session-token source (no API key): its sync is a no-op."""
    return bool(settings.get("session_token")) and not settings.get("api_key")


class ScribeProvider:
    """Lists an organization's scribes and renders one to markdown."""

    source_types: tuple[str, ...] = ("scribe",)
    fetches_documents: bool = True

    def list_source(self, config: SourceConfig) -> Listing:
        if uses_session_token(config.settings):
            return Listing(documents=[], complete=False)
        documents: dict[str, ListedDocument] = {}
        totals: set[int] = set()
        offset = 0
        with closing(_client(config)) as client:
            while True:
                body = client.get("/api/v1/scribes", offset=offset, limit=PAGE_LIMIT)
                data: Sequence[Mapping[str, Any]] = body.get("data") or []
                total = body.get("total")
                if isinstance(total, int):
                    totals.add(total)
                for scribe in data:
                    documents.setdefault(str(scribe["id"]), _listed(scribe))
                offset += len(data)
                if not data or _last_page(len(data), offset, total):
                    break
        consistent = len(totals) <= 1 and all(len(documents) == t for t in totals)
        return Listing(documents=list(documents.values()), complete=consistent)

    def fetch_document(self, config: SourceConfig, identifier: str) -> FetchedDocument | None:
        if uses_session_token(config.settings):
            raise SessionTokenSource(
                f"scribe source {config.source_id} uses a session token: not synced natively"
            )
        with closing(_client(config)) as client:
            try:
                scribe = client.get(f"/api/v1/scribes/{identifier}")
            except NotFound:
                return None
        return FetchedDocument(
            title=str(scribe.get("title") or "Untitled"),
            content=render_scribe(scribe),
            url=scribe.get("url"),
            updated_at=_timestamp(scribe.get("updated_at")),
        )


def _client(config: SourceConfig) -> JsonClient:
    key = config.settings.get("api_key")
    if not key:
        raise Unrecoverable(f"scribe source {config.source_id}: no api_key configured")
    return JsonClient(config.base_url, headers={"X-API-Key": str(key)}, timeout=config.timeout)


def _last_page(size: int, offset: int, total: Any) -> bool:
    if isinstance(total, int):
        return offset >= total
    return size < PAGE_LIMIT


def _listed(scribe: Mapping[str, Any]) -> ListedDocument:
    return ListedDocument(
        identifier=str(scribe["id"]),
        title=str(scribe.get("title") or "Untitled"),
        url=scribe.get("url"),
        updated_at=_timestamp(scribe.get("updated_at")),
    )


def _timestamp(value: Any) -> datetime | None:
    return datetime.fromisoformat(value) if isinstance(value, str) and value else None


def render_scribe(scribe: Mapping[str, Any]) -> str:
    """The description, then the steps: numbered, with their screenshots as images."""
    parts: list[str] = []
    description = str(scribe.get("description") or "").strip()
    if description:
        parts.append(description)
    steps = sorted(
        enumerate(scribe.get("steps") or []),
        key=lambda pair: (pair[1].get("position", pair[0]), pair[0]),
    )
    number = 0
    for _, step in steps:
        kind = str(step.get("kind") or "step")
        text = str(step.get("text") or "").strip()
        if kind == "heading":
            parts.append(f"## {text}")
        elif kind in QUOTED_KINDS:
            parts.append(f"> **{QUOTED_KINDS[kind]}:** {text}")
        else:
            number += 1
            parts.append(_step(number, text, step.get("screenshot_url")))
    return "\n\n".join(part for part in parts if part)


def _step(number: int, text: str, screenshot: Any) -> str:
    marker = f"{number}. "
    pad = " " * len(marker)
    lines = (text or f"Step {number}").split("\n")
    item = marker + "\n".join([lines[0], *[pad + line if line else "" for line in lines[1:]]])
    if screenshot:
        item += f"\n\n{pad}![Step {number}]({screenshot})"
    return item
