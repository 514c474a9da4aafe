"""HubSpot: CRM v3 objects (contacts, companies, deals, tickets) as indexable records.

Protocol (``Authorization: Bearer <private app / OAuth token>``):

* roots: ``HubspotObjectType`` (``contacts``, ``companies``, ``deals``, ``tickets``):
  ``settings.object_types``, else those four.
* walk: ``GET /crm/v3/objects/<type>?limit=100&properties=hs_lastmodifieddate&archived=false``
  page by page (``after`` from ``paging.next.after``; no ``paging`` on the last page). Every
  walk is a complete listing (the list endpoint has no modified-since filter; the search
  endpoint that has one stops at 10,000 results): ``WalkPage.dates`` carries each record's
  ``updatedAt`` so the index skips unchanged records without fetching them.
* fetch: ``GET /crm/v3/objects/<type>/<id>?properties=...`` (the type's text properties:
  names, email, domain, description, subject, content...); 404 (archived or merged): None.
* rate limits: ``X-HubSpot-RateLimit-Remaining`` with ``X-HubSpot-RateLimit-Interval-
  Milliseconds`` (the burst window) recorded on the connection; 429 is a ``Delay`` until
  ``Retry-After`` when sent, else one interval (10 s by default). 5xx ``Retryable``;
  401/403 ``Unrecoverable``.

Node ids: ``HubspotObjectType`` the type; ``HubspotObject`` ``<type>/<object id>``.
"""

from __future__ import annotations

import json
from contextlib import closing
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote, urlencode

import requests

from services.connectors.node_http import NodeClient, blocked, int_header, parse_time, retry_after
from services.connectors.nodes import Connection, Node, NodeRef, NodeSource, WalkPage
from shared.errors import Retryable, Unrecoverable
from shared.http import NotFound

DEFAULT_BASE_URL = "https://api.hubapi.com"
LIMIT = 100
DEFAULT_INTERVAL_MS = 10_000

OBJECT_TYPE = "HubspotObjectType"
OBJECT = "HubspotObject"
#: The properties read per object type (title first).
PROPERTIES: dict[str, tuple[str, ...]] = {
    "contacts": ("firstname", "lastname", "email", "jobtitle", "company"),
    "companies": ("name", "domain", "industry", "description"),
    "deals": ("dealname", "dealstage", "amount", "description"),
    "tickets": ("subject", "content", "hs_pipeline_stage"),
}


class HubspotSource:
    """The CRM records of the connection's HubSpot account."""

    source = "hubspot"
    root_node_types: tuple[str, ...] = (OBJECT_TYPE,)
    indexable_node_types: tuple[str, ...] = (OBJECT,)

    def list_roots(self, conn: Connection) -> list[NodeRef]:
        types = conn.settings.get("object_types") or list(PROPERTIES)
        return [NodeRef(OBJECT_TYPE, str(t)) for t in types]

    def walk(
        self, conn: Connection, root: NodeRef, checkpoint: str | None, since: str | None = None
    ) -> WalkPage:
        query: dict[str, Any] = {
            "limit": int(conn.settings.get("page_size") or LIMIT),
            "properties": "hs_lastmodifieddate",
            "archived": "false",
        }
        after = _after(checkpoint)
        if after:
            query["after"] = after
        with closing(_client(conn)) as client:
            body = client.get(f"/crm/v3/objects/{_type(root.node_id)}?{urlencode(query)}")
        results = body.get("results") if isinstance(body, dict) else None
        if not isinstance(results, list):
            raise Retryable("hubspot: a page without `results`")
        refs: list[NodeRef] = []
        dates: dict[NodeRef, datetime] = {}
        for record in results:
            if not isinstance(record, dict) or not record.get("id"):
                continue
            ref = NodeRef(OBJECT, f"{root.node_id}/{record['id']}")
            refs.append(ref)
            when = parse_time(record.get("updatedAt"))
            if when is not None:
                dates[ref] = when
        following = ((body.get("paging") or {}).get("next") or {}).get("after")
        if not following:
            return WalkPage(refs, None, dates=dates)
        return WalkPage(refs, json.dumps({"after": str(following)}), dates=dates)

    def fetch(self, conn: Connection, ref: NodeRef) -> Node | None:
        kind, _, ident = ref.node_id.partition("/")
        if not kind or not ident:
            raise Unrecoverable(f"hubspot: bad node id {ref.node_id!r}")
        names = PROPERTIES.get(kind, ("name",))
        query = urlencode({"properties": ",".join(names), "archived": "false"})
        with closing(_client(conn)) as client:
            try:
                record = client.get(
                    f"/crm/v3/objects/{_type(kind)}/{quote(ident, safe='')}?{query}"
                )
            except NotFound:
                return None
        values = record.get("properties") or {}
        lines = [f"{name}: {values[name]}" for name in names if values.get(name)]
        title = " ".join(str(values[n]) for n in names[:2] if values.get(n)) or ident
        return Node(
            ref=ref,
            title=title,
            text="\n".join(lines),
            url=None,
            synchronization_date=parse_time(record.get("updatedAt")) or datetime.now(UTC),
        )


SOURCE: NodeSource = HubspotSource()


def _after(checkpoint: str | None) -> str | None:
    try:
        raw = json.loads(checkpoint) if checkpoint else {}
    except ValueError:
        return None
    return str(raw["after"]) if isinstance(raw, dict) and raw.get("after") else None


def _type(kind: str) -> str:
    if not kind:
        raise Unrecoverable("hubspot: empty object type")
    return quote(kind, safe="")


def _client(conn: Connection) -> NodeClient:
    token = conn.credentials.get("access_token") or conn.credentials.get("token")
    if not token:
        raise Unrecoverable(f"hubspot connection {conn.connection_id}: no access_token")

    def inspect(response: requests.Response, what: str) -> None:
        interval = int_header(response, "X-HubSpot-RateLimit-Interval-Milliseconds")
        window = timedelta(milliseconds=interval or DEFAULT_INTERVAL_MS)
        remaining = int_header(response, "X-HubSpot-RateLimit-Remaining")
        if remaining is not None:
            conn.record_quota(remaining, datetime.now(UTC) + window)
        if response.status_code == 429:
            raise blocked(
                conn, retry_after(response) or datetime.now(UTC) + window, f"hubspot, {what}"
            )

    base = (conn.base_url or DEFAULT_BASE_URL).rstrip("/")
    return NodeClient(
        base, inspect=inspect, headers={"Authorization": f"Bearer {token}"}, timeout=conn.timeout
    )
