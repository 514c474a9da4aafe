"""A local HTTP server speaking Microsoft Graph v1.0 for SharePoint: site drives, delta, content.

Checked against Microsoft's published reference:

* https://learn.microsoft.com/en-us/graph/api/drive-list (``GET /sites/{site-id}/drives``:
  ``{value: [drive]}``, ``driveType: documentLibrary``)
* https://learn.microsoft.com/en-us/graph/api/driveitem-delta (``GET /drives/{drive-id}/root/
  delta``, ``$top``; pages of driveItems with ``@odata.nextLink`` until the last, which has
  ``@odata.deltaLink``; calling the deltaLink later lists what changed; deleted items carry
  the ``deleted`` facet; ``token=latest``)
* https://learn.microsoft.com/en-us/graph/api/resources/driveitem (``id``, ``name``,
  ``lastModifiedDateTime``, ``webUrl``, ``size``, ``file.mimeType``, ``folder``, ``root``,
  ``parentReference``)
* https://learn.microsoft.com/en-us/graph/api/driveitem-get-content (``GET /drives/{id}/items/
  {item-id}/content``: ``302 Found`` with ``Location`` a pre-authenticated download URL)
* https://learn.microsoft.com/en-us/onedrive/developer/rest-api/api/driveitem_delta ("Error
  responses": a delta token the service no longer honours is ``410 Gone`` with a
  ``resyncRequired`` error and a ``Location`` header naming the start of a fresh
  enumeration): :meth:`expire_delta_tokens` makes every token issued so far answer that
* https://learn.microsoft.com/en-us/graph/errors (``{error: {code, message, innerError}}``;
  ``itemNotFound``, ``InvalidAuthenticationToken``, ``TooManyRequests``) and
  https://learn.microsoft.com/en-us/graph/throttling plus
  https://learn.microsoft.com/en-us/sharepoint/dev/general-development/how-to-avoid-getting-throttled-or-blocked-in-sharepoint-online
  (429/503 with ``Retry-After`` seconds; ``RateLimit-Limit``, ``RateLimit-Remaining``,
  ``RateLimit-Reset`` (seconds) near the limit)

Authorization: ``Authorization: Bearer <token>`` (``token``, or any of ``tokens``: several
tenants' apps on one server), else 401. Rate limit: ``rate_limit=N`` requests per
``rate_window`` seconds **per token** (Graph throttles per app per tenant:
https://learn.microsoft.com/en-us/graph/throttling-limits), then 429 with ``Retry-After``;
the RateLimit-* headers are sent once 80% of the window is spent.

Large data sets: ``server.populate(site, drive, files=5000)`` builds text files in memory;
:meth:`touch` edits one, :meth:`remove` deletes one (delta then reports it ``deleted``).
"""

from __future__ import annotations

import math
import threading
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote, urlencode

from testkit.fakes.protocol_server import ProtocolServer, Reply, Request, iso

PREFIX = "/v1.0"
BASE_TIME = 1_767_225_600  # 2026-01-01T00:00:00Z


@dataclass
class FakeItem:
    id: str
    drive: str
    name: str
    content: str
    modified: float
    mime_type: str = "text/plain"
    folder: bool = False

    def resource(self, base: str) -> dict[str, Any]:
        body: dict[str, Any] = {
            "id": self.id,
            "name": self.name,
            "lastModifiedDateTime": iso(self.modified),
            "createdDateTime": iso(BASE_TIME),
            "webUrl": f"https://contoso.sharepoint.com/sites/x/Shared%20Documents/{self.name}",
            "size": len(self.content.encode()),
            "parentReference": {"driveId": self.drive, "driveType": "documentLibrary"},
        }
        if self.folder:
            body["folder"] = {"childCount": 0}
        else:
            body["file"] = {"mimeType": self.mime_type}
        return body


class SharepointServer(ProtocolServer):
    def __init__(
        self,
        token: str,
        *,
        rate_limit: int | None = None,
        rate_window: float = 1.0,
        tokens: tuple[str, ...] = (),
    ) -> None:
        super().__init__()
        self.token = token
        self.tokens = frozenset((token, *tokens))
        self.sites: dict[str, list[str]] = {}  # site id -> drive ids
        self.items: dict[str, FakeItem] = {}
        #: the change log: (sequence, item id, drive id, deleted)
        self.log: list[tuple[int, str, str, bool]] = []
        self.rate_limit = rate_limit
        self.rate_window = rate_window
        self._windows: dict[str, tuple[float, int]] = {}
        self._lock_data = threading.Lock()
        self._counter = 0
        self._expired_below = 0  # delta tokens below this answer 410 resyncRequired

    # -- data ----------------------------------------------------------------------------

    def add(self, site: str, drive: str, name: str, content: str, **kw: Any) -> FakeItem:
        with self._lock_data:
            drives = self.sites.setdefault(site, [])
            if drive not in drives:
                drives.append(drive)
            self._counter += 1
            item = FakeItem(
                f"01{self._counter:08d}", drive, name, content, BASE_TIME + self._counter, **kw
            )
            self.items[item.id] = item
            self.log.append((len(self.log) + 1, item.id, drive, False))
            return item

    def populate(self, site: str, drive: str, files: int) -> list[FakeItem]:
        self.add(site, drive, "Folder", "", folder=True)
        return [
            self.add(site, drive, f"note-{i}.txt", f"Note {i} of {drive}.") for i in range(files)
        ]

    def touch(self, item_id: str, content: str) -> None:
        with self._lock_data:
            item = self.items[item_id]
            item.content = content
            item.modified = max(item.modified + 1, time.time())
            self.log.append((len(self.log) + 1, item_id, item.drive, False))

    def remove(self, item_id: str) -> None:
        with self._lock_data:
            item = self.items.pop(item_id)
            self.log.append((len(self.log) + 1, item_id, item.drive, True))

    # -- protocol ------------------------------------------------------------------------

    def expire_delta_tokens(self) -> None:
        """Answer every delta token issued so far with ``410 Gone`` ``resyncRequired``."""
        with self._lock_data:
            self._expired_below = len(self.log) + 1

    def authorized(self, request: Request) -> bool:
        if request.path.startswith("/download/"):
            return True  # pre-authenticated URLs
        return request.headers.get("authorization", "").removeprefix("Bearer ") in self.tokens

    def status_reply(self, status: int, message: str) -> Reply:
        code = {
            401: "InvalidAuthenticationToken",
            404: "itemNotFound",
            429: "TooManyRequests",
            503: "serviceNotAvailable",
        }.get(status, "generalException")
        return Reply(
            status,
            {"error": {"code": code, "message": message, "innerError": {"date": iso(time.time())}}},
        )

    def route(self, request: Request) -> Reply:
        if request.path.startswith("/download/"):
            item = self.items.get(request.path.removeprefix("/download/"))
            if item is None:
                return self.status_reply(404, "gone")
            return Reply(200, item.content.encode(), {"Content-Type": item.mime_type})
        caller = request.headers.get("authorization", "")
        limited, headers = self._quota(caller)
        if limited:
            reply = self.status_reply(429, "Too many requests")
            return Reply(429, reply.body, {**headers, "Retry-After": str(self._retry(caller))})
        reply = self._route(request)
        return Reply(reply.status, reply.body, {**headers, **reply.headers})

    def _route(self, request: Request) -> Reply:
        parts = [unquote(p) for p in request.path.removeprefix(PREFIX).strip("/").split("/")]
        if request.method != "GET" or not request.path.startswith(PREFIX + "/"):
            return self.status_reply(404, "not found")
        if len(parts) == 3 and parts[0] == "sites" and parts[2] == "drives":
            drives = self.sites.get(parts[1])
            if drives is None:
                return self.status_reply(404, "Requested site could not be found")
            return Reply(
                200,
                {
                    "@odata.context": f"{self.base_url}{PREFIX}/$metadata#drives",
                    "value": [
                        {"id": d, "name": "Documents", "driveType": "documentLibrary"}
                        for d in drives
                    ],
                },
            )
        # /drives/{id}/root/delta, or /drives/{id}/items/root/delta() as the SDK writes it
        if parts[0] == "drives" and parts[2:] in (
            ["root", "delta"],
            ["root", "delta()"],
            ["items", "root", "delta"],
            ["items", "root", "delta()"],
        ):
            return self._delta(parts[1], request)
        if len(parts) in (4, 5) and parts[0] == "drives" and parts[2] == "items":
            item = self.items.get(parts[3])
            if item is None or item.drive != parts[1]:
                return self.status_reply(404, "The resource could not be found.")
            if len(parts) == 5 and parts[4] == "content":
                return Reply(302, {}, {"Location": f"{self.base_url}/download/{item.id}"})
            if len(parts) == 4:
                return Reply(200, item.resource(self.base_url))
        return self.status_reply(404, "not found")

    def _quota(self, caller: str) -> tuple[bool, dict[str, str]]:
        if self.rate_limit is None:
            return False, {}
        with self._lock_data:
            start, count = self._windows.get(caller, (0.0, 0))
            now = time.monotonic()
            if now - start >= self.rate_window:
                start, count = now, 0
            count += 1
            self._windows[caller] = (start, count)
        headers: dict[str, str] = {}
        if count >= 0.8 * self.rate_limit:
            headers = {
                "RateLimit-Limit": str(self.rate_limit),
                "RateLimit-Remaining": str(max(0, self.rate_limit - count)),
                "RateLimit-Reset": str(self._retry(caller)),
            }
        return count > self.rate_limit, headers

    def _retry(self, caller: str) -> int:
        start, _ = self._windows.get(caller, (0.0, 0))
        return max(1, math.ceil(start + self.rate_window - time.monotonic()))

    def _delta(self, drive: str, request: Request) -> Reply:
        if not any(drive in drives for drives in self.sites.values()):
            return self.status_reply(404, "The resource could not be found.")
        top = min(int(request.param("$top") or 200), 999)
        token = request.param("token")
        skip = request.param("$skiptoken")
        if token and token.isdigit() and int(token) < self._expired_below:
            fresh = f"{self.base_url}{PREFIX}/drives/{drive}/root/delta?{urlencode({'$top': top})}"
            reply = self.status_reply(410, "Resync required. Replace any local items.")
            gone = {"error": {**reply.body["error"], "code": "resyncRequired"}}
            return Reply(410, gone, {"Location": fresh})
        with self._lock_data:
            head = len(self.log)
            if token == "latest":
                chosen: list[tuple[int, str, bool]] = []
            elif skip is not None:
                origin, offset = (int(x) for x in skip.split("-"))
                chosen = self._since(drive, origin, upto=int(request.param("upto") or head))
                chosen = chosen[offset:]
                head = int(request.param("upto") or head)
            else:
                origin = int(token or 0)
                chosen = self._since(drive, origin, upto=head)
                offset = 0
            page = chosen[:top]
            values = []
            for _, item_id, deleted in page:
                item = self.items.get(item_id)
                if deleted or item is None:
                    values.append({"id": item_id, "deleted": {"state": "deleted"}})
                else:
                    values.append(item.resource(self.base_url))
        link = f"{self.base_url}{PREFIX}/drives/{drive}/root/delta"
        body: dict[str, Any] = {
            "@odata.context": f"{self.base_url}{PREFIX}/$metadata",
            "value": values,
        }
        if len(chosen) > top:
            base = int(token or 0) if skip is None else origin
            query = {"$skiptoken": f"{base}-{offset + top}", "upto": head, "$top": top}
            body["@odata.nextLink"] = f"{link}?{urlencode(query)}"
        else:
            body["@odata.deltaLink"] = f"{link}?{urlencode({'token': head})}"
        return Reply(200, body)

    def _since(self, drive: str, origin: int, *, upto: int) -> list[tuple[int, str, bool]]:
        """The latest state of each item of ``drive`` changed after log entry ``origin``."""
        latest: dict[str, tuple[int, str, bool]] = {}
        for sequence, item_id, item_drive, deleted in self.log[origin:upto]:
            if item_drive == drive:
                latest.pop(item_id, None)
                latest[item_id] = (sequence, item_id, deleted)
        return list(latest.values())
