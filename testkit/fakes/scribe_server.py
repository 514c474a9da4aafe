"""A local Scribe Search & Retrieval API: list and retrieve documents.

Follows Scribe's published OpenAPI 3.1 schema (base URL https://public-api.scribehow.com;
reference https://public-api.scribehow.com/schema/redoc/, schema
https://public-api.scribehow.com/public-api/schema/download/):

* ``GET /v1/documents/?limit=&offset=``: Django REST framework's limit/offset pagination,
  ``{"count", "next", "previous", "results"}``, newest first; ``limit`` defaults to and is
  capped at 100 (``max_limit`` caps it lower to force many pages). Each result is a
  ``DocumentDetailDB``: ``id`` (uuid), ``name``, ``description``, ``link``, ``type``
  (``scribe`` | ``page``), ``created_at``, ``updated_at``, ``team``, ``user_owner``,
  ``actions`` (``[{id, description, screenshot_url}]``, empty for pages) and ``content``
  (Editor.js JSON for pages, null for scribes).
* ``GET /v1/documents/{id}/``: one document; 404 ``{"detail": "Not found."}``.
* ``GET /v1/teams/``: the teams (a list).
* Authentication: ``X-API-Key``; a missing or wrong key is 401 ``{"detail": ...}``.
* Rate limit: with ``per_minute`` set, more document requests than that in a minute answer
  429 ``{"detail": "Request was throttled. Expected available in N seconds."}`` with
  ``Retry-After`` (DRF throttling); the published limit is 60 a minute.

:meth:`ScribeServer.on_list` runs a hook after each list page is computed (for example to
delete a document between pages and shift the offsets).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any
from urllib.parse import urlencode

from testkit.fakes.protocol_server import ProtocolServer, Reply, Request, iso

LIST_PATH = "/v1/documents/"
TEAMS_PATH = "/v1/teams/"
TEAM = {"id": "5b0c3f2e-8f43-4b8e-9d1c-0a1b2c3d4e5f", "name": "Support"}


def action(description: str, screenshot_url: str | None = None) -> dict[str, Any]:
    """One step of a Scribe Document."""
    return {"id": str(uuid.uuid4()), "description": description, "screenshot_url": screenshot_url}


def step(text: str, screenshot_url: str | None = None) -> dict[str, Any]:
    """Alias of :func:`action` for older tests."""
    return action(text, screenshot_url)


class ScribeServer(ProtocolServer):
    """Parameters:
    api_key: the key requests must carry in ``X-API-Key``.
    max_limit: the most documents one page returns (Scribe: 100).
    per_minute: document requests allowed per minute (None: unlimited).
    link_host: the scheme and host ``next``/``previous`` name (default: this server), as
      behind a proxy that rewrites hosts.
    """

    def __init__(
        self,
        api_key: str = "scribe-key",
        *,
        max_limit: int = 100,
        per_minute: int | None = None,
        link_host: str | None = None,
    ) -> None:
        super().__init__()
        self.api_key = api_key
        self.max_limit = max_limit
        self.per_minute = per_minute
        self.link_host = link_host
        self.documents: dict[str, dict[str, Any]] = {}
        self._on_list: Callable[[int], None] | None = None
        self._clock = time.time() - 86_400
        self._window: tuple[int, int] = (0, 0)

    def add_scribe(
        self,
        name: str,
        actions: Sequence[dict[str, Any]] = (),
        *,
        description: str = "",
    ) -> str:
        """A Scribe Document (steps); returns its id."""
        return self._add(name, "scribe", description, list(actions), None)

    def add_page(
        self, name: str, blocks: Sequence[Mapping[str, Any]], *, description: str = ""
    ) -> str:
        """A Knowledge Page whose body is these Editor.js blocks; returns its id."""
        content = {"time": int(self._clock * 1000), "blocks": list(blocks), "version": "2.30.7"}
        return self._add(name, "page", description, [], content)

    def _add(
        self,
        name: str,
        kind: str,
        description: str,
        actions: list[dict[str, Any]],
        content: dict[str, Any] | None,
    ) -> str:
        document_id = str(uuid.uuid4())
        self._clock += 60
        slug = name.replace(" ", "_")
        self.documents[document_id] = {
            "id": document_id,
            "name": name,
            "description": description,
            "link": f"https://scribehow.com/{'page' if kind == 'page' else 'shared'}/"
            f"{slug}__{document_id}",
            "type": kind,
            "created_at": iso(self._clock),
            "updated_at": iso(self._clock),
            "team": TEAM,
            "user_owner": {"id": str(uuid.uuid4()), "name": "Ada", "email": "ada@acme.test"},
            "actions": actions,
            "content": content,
        }
        return document_id

    def remove(self, document_id: str) -> None:
        self.documents.pop(document_id, None)

    remove_scribe = remove

    def on_list(self, hook: Callable[[int], None]) -> None:
        """Call ``hook(offset)`` after each list page is built, before it is sent."""
        self._on_list = hook

    # -- protocol -----------------------------------------------------------------------

    def authorized(self, request: Request) -> bool:
        return request.headers.get("x-api-key") == self.api_key

    def status_reply(self, status: int, message: str) -> Reply:
        detail = {401: "Invalid API key.", 404: "Not found."}.get(status, message)
        return Reply(status, {"detail": detail})

    def route(self, request: Request) -> Reply:
        if request.method != "GET":
            return Reply(405, {"detail": f'Method "{request.method}" not allowed.'})
        if request.path == TEAMS_PATH:
            return Reply(200, [TEAM])
        if not request.path.startswith(LIST_PATH):
            return self.status_reply(404, "Not found.")
        throttled = self._throttled()
        if throttled is not None:
            return throttled
        if request.path == LIST_PATH:
            return self._list(request)
        document_id = request.path.removeprefix(LIST_PATH).rstrip("/")
        if request.path.endswith("/") and document_id in self.documents:
            return Reply(200, self.documents[document_id])
        return self.status_reply(404, "Not found.")

    def _throttled(self) -> Reply | None:
        if self.per_minute is None:
            return None
        minute = int(time.time() // 60)
        seen = self._window[1] + 1 if self._window[0] == minute else 1
        self._window = (minute, seen)
        if seen <= self.per_minute:
            return None
        wait = max(1, int((minute + 1) * 60 - time.time()))
        body = {"detail": f"Request was throttled. Expected available in {wait} seconds."}
        return Reply(429, body, {"Retry-After": str(wait)})

    def _list(self, request: Request) -> Reply:
        try:
            offset = int(request.param("offset") or 0)
            limit = int(request.param("limit") or 100)
        except ValueError:
            return Reply(400, {"detail": "Invalid input provided."})
        offset, limit = max(0, offset), min(max(1, limit), 100, self.max_limit)
        newest_first = sorted(self.documents.values(), key=lambda d: d["created_at"], reverse=True)
        results = newest_first[offset : offset + limit]
        base = f"{self.link_host or self.base_url}{LIST_PATH}"
        more = offset + limit < len(newest_first)
        body = {
            "count": len(newest_first),
            "next": f"{base}?{urlencode({'limit': limit, 'offset': offset + limit})}"
            if more
            else None,
            "previous": (
                f"{base}?{urlencode({'limit': limit, 'offset': max(0, offset - limit)})}"
                if offset
                else None
            ),
            "results": results,
        }
        if self._on_list is not None:
            self._on_list(offset)
        return Reply(200, body)
