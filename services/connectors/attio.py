"""Attio: the records of a workspace's objects (people, companies, deals, custom objects).

Protocol (REST v2, ``Authorization: Bearer <access token>``):

* roots: ``AttioObject`` (an object's api slug or id): ``settings.objects``, else
  ``GET /v2/objects`` (``data``: every object of the workspace).
* walk: ``POST /v2/objects/<object>/records/query`` with ``{"limit": 500, "offset": n,
  "sorts": [{"attribute": "created_at", "direction": "asc"}]}`` (``data``; a page shorter
  than the limit is the last). Records carry no last-modified time (each attribute value has
  its ``active_from``): every walk is a complete listing, and ``fetch`` computes the date.
* fetch: ``GET /v2/objects/<object>/records/<record_id>``; the text is each attribute's
  active values (names, emails, domains, text, selects); the synchronization date is the
  latest ``active_from`` of the values (else ``created_at``). 404: None.
* rate limits: Attio sends no quota headers; its 429 carries ``Retry-After`` as an HTTP
  date (usually the next second): a ``Delay`` recorded on the connection. 5xx
  ``Retryable``; 401/403 ``Unrecoverable``.

Node ids: ``AttioObject`` the object slug; ``AttioRecord`` ``<object>/<record id>``.
"""

from __future__ import annotations

import json
from contextlib import closing
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

import requests

from services.connectors.node_http import NodeClient, blocked, parse_time, retry_after
from services.connectors.nodes import Connection, Node, NodeRef, NodeSource, WalkPage
from shared.errors import Retryable, Unrecoverable
from shared.http import NotFound

DEFAULT_BASE_URL = "https://api.attio.com"
LIMIT = 500

OBJECT = "AttioObject"
RECORD = "AttioRecord"
#: The keys that hold an attribute value's text, by attribute type.
VALUE_KEYS = ("value", "full_name", "email_address", "domain", "original_phone_number")


class AttioSource:
    """The records of the connection's Attio objects."""

    source = "attio"
    root_node_types: tuple[str, ...] = (OBJECT,)
    indexable_node_types: tuple[str, ...] = (RECORD,)

    def list_roots(self, conn: Connection) -> list[NodeRef]:
        named = conn.settings.get("objects")
        if named:
            return [NodeRef(OBJECT, str(slug)) for slug in named]
        with closing(_client(conn)) as client:
            body = client.get("/v2/objects")
        return [
            NodeRef(OBJECT, str(o.get("api_slug") or o["id"]["object_id"]))
            for o in _data(body, list)
        ]

    def walk(
        self, conn: Connection, root: NodeRef, checkpoint: str | None, since: str | None = None
    ) -> WalkPage:
        limit = int(conn.settings.get("page_size") or LIMIT)
        offset = _offset(checkpoint)
        query = {
            "limit": limit,
            "offset": offset,
            "sorts": [{"attribute": "created_at", "direction": "asc"}],
        }
        with closing(_client(conn)) as client:
            body = client.post(f"/v2/objects/{_slug(root.node_id)}/records/query", query)
        records = _data(body, list)
        refs = [
            NodeRef(RECORD, f"{root.node_id}/{r['id']['record_id']}")
            for r in records
            if isinstance(r.get("id"), dict) and r["id"].get("record_id")
        ]
        if len(records) < limit:
            return WalkPage(refs, None)
        return WalkPage(refs, json.dumps({"offset": offset + len(records)}))

    def fetch(self, conn: Connection, ref: NodeRef) -> Node | None:
        slug, _, record_id = ref.node_id.partition("/")
        if not slug or not record_id:
            raise Unrecoverable(f"attio: bad node id {ref.node_id!r}")
        with closing(_client(conn)) as client:
            try:
                body = client.get(f"/v2/objects/{_slug(slug)}/records/{quote(record_id, safe='')}")
            except NotFound:
                return None
        record = _data(body, dict)
        lines: list[str] = []
        latest = parse_time(record.get("created_at"))
        for attribute, values in sorted((record.get("values") or {}).items()):
            texts = []
            for value in values if isinstance(values, list) else []:
                if value.get("active_until"):
                    continue
                when = parse_time(value.get("active_from"))
                if when is not None and (latest is None or when > latest):
                    latest = when
                text = next((value[k] for k in VALUE_KEYS if value.get(k) not in (None, "")), None)
                if text is None and isinstance(value.get("option"), dict):
                    text = value["option"].get("title")
                if text is not None:
                    texts.append(str(text))
            if texts:
                lines.append(f"{attribute}: {', '.join(texts)}")
        names = (record.get("values") or {}).get("name") or []
        first = names[0] if names and isinstance(names[0], dict) else {}
        title = str(first.get("full_name") or first.get("value") or record_id)
        return Node(
            ref=ref,
            title=title,
            text="\n".join(lines),
            url=record.get("web_url"),
            synchronization_date=latest or datetime.now(UTC),
        )


SOURCE: NodeSource = AttioSource()


def _offset(checkpoint: str | None) -> int:
    try:
        raw = json.loads(checkpoint) if checkpoint else {}
        return int(raw.get("offset") or 0) if isinstance(raw, dict) else 0
    except (ValueError, TypeError):
        return 0


def _slug(slug: str) -> str:
    if not slug:
        raise Unrecoverable("attio: empty object")
    return quote(slug, safe="")


def _data(body: Any, kind: type) -> Any:
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, kind):
        raise Retryable(f"attio: an answer whose `data` is not a {kind.__name__}")
    return data


def _client(conn: Connection) -> NodeClient:
    token = conn.credentials.get("access_token") or conn.credentials.get("token")
    if not token:
        raise Unrecoverable(f"attio connection {conn.connection_id}: no access_token")

    def inspect(response: requests.Response, what: str) -> None:
        until = retry_after(response)
        if response.status_code == 429 and until is not None:
            raise blocked(conn, until, f"attio, {what}")

    base = (conn.base_url or DEFAULT_BASE_URL).rstrip("/")
    return NodeClient(
        base, inspect=inspect, headers={"Authorization": f"Bearer {token}"}, timeout=conn.timeout
    )
