"""A local HTTP server speaking HubSpot's CRM v3 objects API (list and read).

Checked against HubSpot's published reference:

* https://developers.hubspot.com/docs/api-reference/latest/crm/objects/ (``GET /crm/v3/
  objects/{objectType}``: ``limit`` (max 100), ``after``, ``properties``, ``archived``;
  answer ``{results: [{id, properties, createdAt, updatedAt, archived}], paging: {next:
  {after, link}}}``, no ``paging`` on the last page; ``GET /crm/v3/objects/{objectType}/
  {objectId}``)
* https://developers.hubspot.com/docs/guides/apps/api-usage/usage-details (burst limit
  headers ``X-HubSpot-RateLimit-Max``, ``-Remaining``, ``-Interval-Milliseconds``, daily
  ``X-HubSpot-RateLimit-Daily``/``-Daily-Remaining``; 429 body ``{status: "error",
  message, errorType: "RATE_LIMIT", policyName: "TEN_SECONDLY_ROLLING", correlationId}``)
* errors: ``{status: "error", message, correlationId, category}`` (``OBJECT_NOT_FOUND``,
  ``INVALID_AUTHENTICATION``)

Authorization: ``Authorization: Bearer <token>``, else 401. Rate limit: ``rate_limit=N``
calls per ``rate_window`` seconds (headers on every answer), then 429.

Large data sets: ``server.populate("contacts", 5000)``; :meth:`touch` edits one.
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import Any
from urllib.parse import urlencode

from testkit.fakes.protocol_server import ProtocolServer, Reply, Request, iso

BASE_TIME = 1_767_225_600


class HubspotServer(ProtocolServer):
    def __init__(
        self, token: str, *, rate_limit: int | None = None, rate_window: float = 10.0
    ) -> None:
        super().__init__()
        self.token = token
        #: object type -> id -> (properties, updated epoch)
        self.objects: dict[str, dict[str, tuple[dict[str, str], float]]] = {}
        self.rate_limit = rate_limit
        self.rate_window = rate_window
        self._window: tuple[float, int] = (0.0, 0)
        self._data_lock = threading.Lock()
        self._counter = 0

    def populate(self, kind: str, count: int) -> list[str]:
        ids = []
        with self._data_lock:
            table = self.objects.setdefault(kind, {})
            for i in range(count):
                self._counter += 1
                ident = str(500 + self._counter)
                table[ident] = (
                    {
                        "firstname": f"Ada{i}",
                        "lastname": "Lovelace",
                        "email": f"ada{i}@x.io",
                        "name": f"Company {i}",
                        "dealname": f"Deal {i}",
                        "subject": f"Ticket {i}",
                    },
                    BASE_TIME + self._counter,
                )
                ids.append(ident)
        return ids

    def touch(self, kind: str, ident: str, **values: str) -> None:
        with self._data_lock:
            props, updated = self.objects[kind][ident]
            self.objects[kind][ident] = ({**props, **values}, max(updated + 1, time.time()))

    def authorized(self, request: Request) -> bool:
        return request.headers.get("authorization") == f"Bearer {self.token}"

    def status_reply(self, status: int, message: str) -> Reply:
        category = {401: "INVALID_AUTHENTICATION", 404: "OBJECT_NOT_FOUND", 429: "RATE_LIMITS"}
        body: dict[str, Any] = {
            "status": "error",
            "message": message,
            "correlationId": str(uuid.uuid4()),
            "category": category.get(status, "INTERNAL_ERROR"),
        }
        if status == 429:
            body.update(errorType="RATE_LIMIT", policyName="TEN_SECONDLY_ROLLING")
        return Reply(status, body)

    def route(self, request: Request) -> Reply:
        limited, headers = self._quota()
        if limited:
            reply = self.status_reply(429, "You have reached your ten_secondly_rolling limit.")
            return Reply(429, reply.body, headers)
        reply = self._route(request)
        return Reply(reply.status, reply.body, {**headers, **reply.headers})

    def _route(self, request: Request) -> Reply:
        parts = request.path.strip("/").split("/")
        if request.method != "GET" or parts[:3] != ["crm", "v3", "objects"] or len(parts) < 4:
            return self.status_reply(404, "not found")
        table = self.objects.get(parts[3])
        if table is None:
            return self.status_reply(400, f"Unable to infer object type from: {parts[3]}")
        wanted = (request.param("properties") or "").split(",")
        if len(parts) == 5:
            row = table.get(parts[4])
            if row is None:
                return self.status_reply(404, "Object not found.  objectId are usually numeric.")
            return Reply(200, _record(parts[4], row, wanted))
        limit = int(request.param("limit") or 10)
        if limit > 100:
            return self.status_reply(400, "limit may not exceed 100")
        after = int(request.param("after") or 0)
        with self._data_lock:
            ids = sorted(table, key=int)
            chosen = [i for i in ids if int(i) > after][:limit]
            rows = [_record(i, table[i], wanted) for i in chosen]
            more = bool(chosen) and int(chosen[-1]) < int(ids[-1])
        body: dict[str, Any] = {"results": rows}
        if more:
            token = chosen[-1]
            query = {k: v[0] for k, v in request.query.items() if k != "after"}
            link = f"{self.base_url}{request.path}?{urlencode({**query, 'after': token})}"
            body["paging"] = {"next": {"after": token, "link": link}}
        return Reply(200, body)

    def _quota(self) -> tuple[bool, dict[str, str]]:
        if self.rate_limit is None:
            return False, {}
        with self._data_lock:
            start, count = self._window
            now = time.monotonic()
            if now - start >= self.rate_window:
                start, count = now, 0
            count += 1
            self._window = (start, count)
        headers = {
            "X-HubSpot-RateLimit-Max": str(self.rate_limit),
            "X-HubSpot-RateLimit-Remaining": str(max(0, self.rate_limit - count)),
            "X-HubSpot-RateLimit-Interval-Milliseconds": str(int(self.rate_window * 1000)),
        }
        return count > self.rate_limit, headers


def _record(ident: str, row: tuple[dict[str, str], float], wanted: list[str]) -> dict[str, Any]:
    props, updated = row
    chosen = {k: v for k, v in props.items() if k in wanted}
    chosen["hs_lastmodifieddate"] = iso(updated)
    chosen["hs_object_id"] = ident
    return {
        "id": ident,
        "properties": chosen,
        "createdAt": iso(BASE_TIME),
        "updatedAt": iso(updated),
        "archived": False,
    }
