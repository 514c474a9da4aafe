"""A local Confluence Cloud REST API v2: spaces, their pages, one page with its body.

Endpoints: ``GET /wiki/api/v2/spaces`` (``keys`` comma-separated or repeated, ``status``,
``limit``, ``cursor``), ``GET /wiki/api/v2/spaces/{id}/pages`` (``status``, default
``current,archived`` as Confluence's is, ``limit``, ``cursor``), ``GET /wiki/api/v2/pages``
(the same, across spaces or for ``space-id``, and ``title``) and
``GET /wiki/api/v2/pages/{id}`` (``body-format=storage`` adds the storage body; a trashed or
unknown page is 404). Pages of results carry a relative ``_links.next`` (and a ``Link``
header) with an opaque cursor; ``limit`` defaults to 25, is at most 250 and is further capped
by ``max_limit`` to force many pages. ``_links.base`` (in lists and single pages) is
``site_url + "/wiki"``. Requests need basic auth with the configured email and API token
(else 401).

References: https://developer.atlassian.com/cloud/confluence/rest/v2/api-group-space/,
https://developer.atlassian.com/cloud/confluence/rest/v2/api-group-page/ (Get pages, Get
pages in space, Get page by id), https://developer.atlassian.com/cloud/confluence/rest/v2/intro/
(cursor pagination: ``_links.next`` and the ``Link`` header). atlassian-python-api's
``ConfluenceV2`` drives this fake in a test.
"""

from __future__ import annotations

import base64
import time
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlencode

from testkit.fakes.protocol_server import ProtocolServer, Reply, Request, iso

API = "/wiki/api/v2"
ERROR_CODES = {400: "INVALID_REQUEST_PARAMETER", 401: "UNAUTHORIZED", 404: "NOT_FOUND"}


class ConfluenceServer(ProtocolServer):
    """Parameters:
    email / token: the basic-auth credentials requests must carry.
    max_limit: the most results one page returns (Confluence: 250).
    site_url: what ``_links.base`` names (as the real API names the site, not the API host).
    next_origin: when set, ``_links.next`` is absolute on this origin (``http://host:port``)
      instead of relative: an answer a client must not follow to another origin.
    """

    def __init__(
        self,
        email: str = "bot@example.com",
        token: str = "confluence-token",
        *,
        max_limit: int = 250,
        site_url: str = "https://acme.atlassian.net",
        next_origin: str | None = None,
    ) -> None:
        super().__init__()
        self.next_origin = next_origin
        self.credentials = base64.b64encode(f"{email}:{token}".encode()).decode()
        self.max_limit = max_limit
        self.site_url = site_url
        self.spaces: dict[str, dict[str, Any]] = {}
        self.pages: dict[str, dict[str, Any]] = {}
        self._next_id = 10_000
        self._clock = time.time() - 86_400

    def _id(self) -> str:
        self._next_id += 1
        return str(self._next_id)

    def add_space(self, key: str, name: str, *, status: str = "current") -> str:
        space_id = self._id()
        self.spaces[space_id] = {
            "id": space_id,
            "key": key,
            "name": name,
            "type": "global",
            "status": status,
            "authorId": "557058:author",
            "createdAt": iso(self._clock),
            "homepageId": None,
            "description": None,
            "icon": None,
            "_links": {"webui": f"/spaces/{key}"},
        }
        return space_id

    def add_page(
        self,
        space_id: str,
        title: str,
        storage: str = "<p></p>",
        *,
        status: str = "current",
        parent_id: str | None = None,
    ) -> str:
        page_id = self._id()
        self._clock += 60
        key = self.spaces[space_id]["key"]
        self.pages[page_id] = {
            "id": page_id,
            "status": status,
            "title": title,
            "spaceId": space_id,
            "parentId": parent_id,
            "parentType": "page" if parent_id else None,
            "position": len(self.pages),
            "authorId": "557058:author",
            "ownerId": "557058:author",
            "createdAt": iso(self._clock),
            "version": {"createdAt": iso(self._clock), "number": 1, "authorId": "557058:author"},
            "_storage": storage,
            "_links": {
                "webui": f"/spaces/{key}/pages/{page_id}/{title.replace(' ', '+')}",
                "editui": f"/pages/resumedraft.action?draftId={page_id}",
                "tinyui": f"/x/{page_id}",
            },
        }
        return page_id

    def edit_page(
        self, page_id: str, *, title: str | None = None, storage: str | None = None
    ) -> None:
        page = self.pages[page_id]
        self._clock += 60
        if title is not None:
            page["title"] = title
        if storage is not None:
            page["_storage"] = storage
        number = page["version"]["number"] + 1
        page["version"] = {**page["version"], "number": number, "createdAt": iso(self._clock)}

    # -- protocol -----------------------------------------------------------------------

    def authorized(self, request: Request) -> bool:
        return request.headers.get("authorization") == f"Basic {self.credentials}"

    def status_reply(self, status: int, message: str) -> Reply:
        code = ERROR_CODES.get(status, "ERROR")
        error = {"status": status, "code": code, "title": message, "detail": None}
        return Reply(status, {"errors": [error]})

    def route(self, request: Request) -> Reply:
        if request.method != "GET" or not request.path.startswith(API + "/"):
            return self.status_reply(404, "Not Found")
        parts = request.path.removeprefix(API + "/").split("/")
        if parts == ["spaces"]:
            keys = {k for v in request.query.get("keys", []) for k in v.split(",") if k}
            spaces = [s for s in self.spaces.values() if not keys or s["key"] in keys]
            return self._page_of(request, self._with_status(request, spaces, None))
        if len(parts) == 3 and parts[0] == "spaces" and parts[2] == "pages":
            if parts[1] not in self.spaces:
                return self.status_reply(404, "Not Found")
            pages = [p for p in self.pages.values() if p["spaceId"] == parts[1]]
            visible = self._with_status(request, pages, "current,archived")
            return self._page_of(request, [_public(p) for p in visible])
        if parts == ["pages"]:
            # Get pages (every space, or ``space-id``; atlassian-python-api lists this way)
            ids = {i for v in request.query.get("space-id", []) for i in v.split(",") if i}
            pages = [p for p in self.pages.values() if not ids or p["spaceId"] in ids]
            title = request.param("title")
            pages = [p for p in pages if title is None or p["title"] == title]
            visible = self._with_status(request, pages, "current,archived")
            return self._page_of(request, [_public(p) for p in visible])
        if len(parts) == 2 and parts[0] == "pages":
            page = self.pages.get(parts[1])
            if page is None or page["status"] in ("trashed", "deleted"):
                return self.status_reply(404, "Not Found")
            body: dict[str, Any] = {}
            if request.param("body-format") == "storage":
                body = {"storage": {"representation": "storage", "value": page["_storage"]}}
            links = {**page["_links"], "base": f"{self.site_url}/wiki"}
            return Reply(200, {**_public(page), "body": body, "_links": links})
        return self.status_reply(404, "Not Found")

    @staticmethod
    def _with_status(
        request: Request, items: Sequence[dict[str, Any]], default: str | None
    ) -> list[dict[str, Any]]:
        wanted = request.param("status", default)
        if not wanted:
            return list(items)
        statuses = set(wanted.split(","))
        return [item for item in items if item["status"] in statuses]

    def _page_of(self, request: Request, items: Sequence[dict[str, Any]]) -> Reply:
        limit = int(request.param("limit") or 25)
        if not 1 <= limit <= 250:
            return self.status_reply(400, "limit must be between 1 and 250")
        size = min(limit, self.max_limit)
        cursor = request.param("cursor")
        try:
            start = int(base64.urlsafe_b64decode(cursor.encode()).decode()) if cursor else 0
        except ValueError:
            return self.status_reply(400, "Invalid cursor")
        links: dict[str, str] = {"base": f"{self.site_url}/wiki"}
        headers: dict[str, str] = {}
        if start + size < len(items):
            query = {k: ",".join(v) for k, v in request.query.items() if k != "cursor"}
            query["cursor"] = base64.urlsafe_b64encode(str(start + size).encode()).decode()
            links["next"] = f"{self.next_origin or ''}{request.path}?{urlencode(query)}"
            headers["Link"] = f'<{links["next"]}>; rel="next", <{links["base"]}>; rel="base"'
        return Reply(200, {"results": list(items[start : start + size]), "_links": links}, headers)


def _public(page: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in page.items() if not k.startswith("_") or k == "_links"}
