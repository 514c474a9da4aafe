"""A local Scribe API speaking the protocol ``services/connectors/scribe.py``
documents: ``GET /api/v1/scribes?offset=&limit=`` and ``GET /api/v1/scribes/{id}``.

Requests need ``X-API-Key`` (else 401). ``max_limit`` caps ``limit`` to force many pages;
``include_total=False`` leaves ``total`` out so only a short page ends the listing.
:meth:`ScribeServer.on_list` runs a hook after each list page is computed (for example to
delete a scribe between pages and shift the offsets).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from testkit.fakes.protocol_server import ProtocolServer, Reply, Request, iso

LIST_PATH = "/api/v1/scribes"


def step(text: str, screenshot_url: str | None = None, *, kind: str = "step") -> dict[str, Any]:
    return {"kind": kind, "text": text, "screenshot_url": screenshot_url}


class ScribeServer(ProtocolServer):
    """Parameters:
    api_key: the key requests must carry in ``X-API-Key``.
    max_limit: the most scribes one page returns.
    include_total: whether list pages carry ``total``.
    """

    def __init__(
        self, api_key: str = "scribe-key", *, max_limit: int = 100, include_total: bool = True
    ) -> None:
        super().__init__()
        self.api_key = api_key
        self.max_limit = max_limit
        self.include_total = include_total
        self.scribes: dict[str, dict[str, Any]] = {}
        self._on_list: Callable[[int], None] | None = None
        self._clock = time.time() - 86_400

    def add_scribe(
        self, title: str, steps: Sequence[dict[str, Any]] = (), *, description: str = ""
    ) -> str:
        scribe_id = uuid.uuid4().hex[:22]
        self._clock += 60
        self.scribes[scribe_id] = {
            "id": scribe_id,
            "title": title,
            "url": f"https://scribehow.com/shared/{title.replace(' ', '_')}__{scribe_id}",
            "created_at": iso(self._clock),
            "updated_at": iso(self._clock),
            "description": description,
            "steps": [{"position": i, **s} for i, s in enumerate(steps)],
        }
        return scribe_id

    def remove_scribe(self, scribe_id: str) -> None:
        self.scribes.pop(scribe_id, None)

    def on_list(self, hook: Callable[[int], None]) -> None:
        """Call ``hook(offset)`` after each list page is built, before it is sent."""
        self._on_list = hook

    # -- protocol -----------------------------------------------------------------------

    def authorized(self, request: Request) -> bool:
        return request.headers.get("x-api-key") == self.api_key

    def status_reply(self, status: int, message: str) -> Reply:
        return Reply(status, {"error": {"status": status, "message": message}})

    def route(self, request: Request) -> Reply:
        if request.method != "GET":
            return self.status_reply(405, "Method Not Allowed")
        if request.path == LIST_PATH:
            return self._list(request)
        scribe_id = request.path.removeprefix(LIST_PATH + "/")
        if request.path.startswith(LIST_PATH + "/") and scribe_id in self.scribes:
            return Reply(200, self.scribes[scribe_id])
        return self.status_reply(404, "Not Found")

    def _list(self, request: Request) -> Reply:
        try:
            offset = int(request.param("offset") or 0)
            limit = int(request.param("limit") or 20)
        except ValueError:
            return self.status_reply(400, "offset and limit must be integers")
        if offset < 0 or not 1 <= limit <= 100:
            return self.status_reply(400, "offset >= 0 and 1 <= limit <= 100")
        size = min(limit, self.max_limit)
        every = list(self.scribes.values())
        summaries = [
            {k: s[k] for k in ("id", "title", "url", "created_at", "updated_at")}
            for s in every[offset : offset + size]
        ]
        body: dict[str, Any] = {"data": summaries, "offset": offset, "limit": size}
        if self.include_total:
            body["total"] = len(every)
        if self._on_list is not None:
            self._on_list(offset)
        return Reply(200, body)
