"""A local HTTP server speaking Attio's REST API v2: objects, record queries, records.

Checked against Attio's published reference:

* https://docs.attio.com/rest-api/endpoint-reference/records/list-records (``POST /v2/
  objects/{object}/records/query``, body ``{filter, sorts, limit (default 500), offset}``;
  answer ``{data: [record]}``, no cursor: a page shorter than ``limit`` is the last)
* https://docs.attio.com/rest-api/endpoint-reference/records/get-a-record (``GET /v2/
  objects/{object}/records/{record_id}``: ``{data: record}``; a record is ``{id:
  {workspace_id, object_id, record_id}, created_at, web_url, values: {attribute:
  [{active_from, active_until, created_by_actor, attribute_type, ...}]}}``)
* https://docs.attio.com/rest-api/endpoint-reference/objects/list-objects (``GET /v2/objects``)
* https://docs.attio.com/rest-api/guides/rate-limiting (100 reads a second; 429 with
  ``Retry-After`` an HTTP date, body ``{status_code: 429, type: "rate_limit_error", code:
  "rate_limit_exceeded", message}``) and the error shape ``{status_code, type, code,
  message}`` (404 ``not_found``, 401 ``unauthorized``)

Attio publishes no official Python SDK: the test drives this fake with ``requests`` and the
documented shapes. Authorization: ``Authorization: Bearer <token>``, else 401. Rate limit:
``rate_limit=N`` requests per second, then 429.

Large data sets: ``server.populate("people", 1000)``; :meth:`touch` sets a new name value.
"""

from __future__ import annotations

import threading
import time
import uuid
from email.utils import formatdate
from typing import Any

from testkit.fakes.protocol_server import ProtocolServer, Reply, Request, iso

WORKSPACE = "14beef7a-99f7-4534-a87e-70b564330a4c"
BASE_TIME = 1_767_225_600


def _value(kind: str, text: str, since: float, **extra: Any) -> dict[str, Any]:
    return {
        "active_from": iso(since),
        "active_until": None,
        "created_by_actor": {"type": "api-token", "id": None},
        "attribute_type": kind,
        **extra,
        **({"value": text} if kind == "text" else {}),
    }


class AttioServer(ProtocolServer):
    def __init__(self, token: str, *, rate_limit: int | None = None) -> None:
        super().__init__()
        self.token = token
        self.objects: dict[str, str] = {}  # slug -> object id
        self.records: dict[str, dict[str, dict[str, Any]]] = {}  # slug -> id -> record
        self.rate_limit = rate_limit
        self._second: tuple[int, int] = (0, 0)
        self._data_lock = threading.Lock()
        self._counter = 0

    def populate(self, slug: str, count: int) -> list[str]:
        ids = []
        with self._data_lock:
            object_id = self.objects.setdefault(slug, str(uuid.uuid4()))
            table = self.records.setdefault(slug, {})
            for i in range(count):
                self._counter += 1
                record_id = str(uuid.UUID(int=self._counter))
                born = BASE_TIME + self._counter
                table[record_id] = {
                    "id": {
                        "workspace_id": WORKSPACE,
                        "object_id": object_id,
                        "record_id": record_id,
                    },
                    "created_at": iso(born),
                    "web_url": f"https://app.attio.com/acme/{slug}/{record_id}",
                    "values": {
                        "name": [
                            _value(
                                "personal-name",
                                "",
                                born,
                                full_name=f"Grace {i}",
                                first_name="Grace",
                                last_name=str(i),
                            )
                        ],
                        "description": [_value("text", f"Record {i} of {slug}.", born)],
                        "email_addresses": [
                            _value("email-address", "", born, email_address=f"grace{i}@x.io")
                        ],
                    },
                }
                ids.append(record_id)
        return ids

    def touch(self, slug: str, record_id: str, description: str) -> None:
        with self._data_lock:
            values = self.records[slug][record_id]["values"]
            now = max(time.time(), BASE_TIME + self._counter + 1)
            for old in values["description"]:
                old["active_until"] = iso(now)
            values["description"].append(_value("text", description, now))

    def authorized(self, request: Request) -> bool:
        return request.headers.get("authorization") == f"Bearer {self.token}"

    def status_reply(self, status: int, message: str) -> Reply:
        kind, code = {
            401: ("auth_error", "unauthorized"),
            404: ("invalid_request_error", "not_found"),
            429: ("rate_limit_error", "rate_limit_exceeded"),
        }.get(status, ("api_error", "internal_error"))
        return Reply(
            status, {"status_code": status, "type": kind, "code": code, "message": message}
        )

    def route(self, request: Request) -> Reply:
        if self._over_limit():
            reply = self.status_reply(429, "Rate limit exceeded, please try again later")
            return Reply(
                429, reply.body, {"Retry-After": formatdate(int(time.time()) + 1, usegmt=True)}
            )
        parts = request.path.strip("/").split("/")
        if parts == ["v2", "objects"] and request.method == "GET":
            data = [
                {
                    "id": {"workspace_id": WORKSPACE, "object_id": oid},
                    "api_slug": slug,
                    "singular_noun": slug.rstrip("s"),
                    "plural_noun": slug,
                }
                for slug, oid in self.objects.items()
            ]
            return Reply(200, {"data": data})
        if len(parts) < 4 or parts[:2] != ["v2", "objects"] or parts[3] != "records":
            return self.status_reply(404, "not found")
        table = self.records.get(parts[2])
        if table is None:
            return self.status_reply(404, "The referenced object was not found.")
        if parts[4:] == ["query"] and request.method == "POST":
            body = request.body or {}
            limit, offset = int(body.get("limit") or 500), int(body.get("offset") or 0)
            with self._data_lock:
                rows = list(table.values())[offset : offset + limit]
            return Reply(200, {"data": rows})
        if len(parts) == 5 and request.method == "GET":
            record = table.get(parts[4])
            if record is None:
                return self.status_reply(404, "Record not found.")
            return Reply(200, {"data": record})
        return self.status_reply(404, "not found")

    def _over_limit(self) -> bool:
        if self.rate_limit is None:
            return False
        with self._data_lock:
            second, count = self._second
            now = int(time.time())
            count = count + 1 if now == second else 1
            self._second = (now, count)
            return count > self.rate_limit
