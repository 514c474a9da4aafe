"""Asana: the tasks of a project (with their comments).

Protocol (REST under ``/api/1.0``, ``Authorization: Bearer <personal access token>``; every
answer wraps its payload in ``data``):

* roots: ``AsanaProject`` gids: ``settings.projects``, else ``GET /workspaces`` and
  ``GET /projects?workspace=`` (``limit`` / ``offset`` pagination, ``next_page.offset``).
* walk: ``GET /tasks?project=<gid>&limit=100&opt_fields=name,modified_at`` page by page
  (``offset`` from ``next_page``, null on the last page); ``since`` adds ``modified_since``.
  The watermark is the first page's ``Date`` (the provider's clock), so an edit made while
  the walk runs is listed by the next walk.
* fetch: ``GET /tasks/<gid>?opt_fields=name,notes,modified_at,permalink_url,parent`` and its
  comments, ``GET /tasks/<gid>/stories`` (``type == "comment"``), folded into the text.
* rate limits: Asana answers 429 with ``Retry-After`` (seconds) and sends no quota headers:
  the 429 is a ``Delay`` recorded on the connection. 5xx ``Retryable``; 401/403
  ``Unrecoverable``; 404 (or a deleted task) in ``fetch``: None.

Node ids: ``AsanaProject`` the project gid; ``AsanaTask`` the task gid.
"""

from __future__ import annotations

import json
from contextlib import closing
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any
from urllib.parse import quote, urlencode

import requests

from services.connectors.node_http import NodeClient, blocked, parse_time, retry_after
from services.connectors.nodes import Connection, Node, NodeRef, NodeSource, WalkPage
from shared.errors import Retryable, Unrecoverable
from shared.http import NotFound

DEFAULT_BASE_URL = "https://app.asana.com"
LIMIT = 100

PROJECT = "AsanaProject"
TASK = "AsanaTask"


class AsanaSource:
    """The tasks of the connection's Asana projects."""

    source = "asana"
    root_node_types: tuple[str, ...] = (PROJECT,)
    indexable_node_types: tuple[str, ...] = (TASK,)

    def list_roots(self, conn: Connection) -> list[NodeRef]:
        named = conn.settings.get("projects")
        if named:
            return [NodeRef(PROJECT, str(gid)) for gid in named]
        with closing(_client(conn)) as client:
            workspaces = [w["gid"] for w in _pages(client, "/workspaces", {})]
            return [
                NodeRef(PROJECT, str(p["gid"]))
                for workspace in workspaces
                for p in _pages(client, "/projects", {"workspace": workspace})
            ]

    def walk(
        self, conn: Connection, root: NodeRef, checkpoint: str | None, since: str | None = None
    ) -> WalkPage:
        state = _state(checkpoint)
        query: dict[str, Any] = {
            "project": root.node_id,
            "limit": int(conn.settings.get("page_size") or LIMIT),
            "opt_fields": "name,modified_at",
        }
        if state.get("offset"):
            query["offset"] = state["offset"]
        if since:
            query["modified_since"] = since
        with closing(_client(conn)) as client:
            response = client.request("GET", f"/tasks?{urlencode(query)}")
        body = _body(response)
        start = state.get("start") or _server_time(response)
        refs: list[NodeRef] = []
        dates: dict[NodeRef, datetime] = {}
        for task in _data(body):
            ref = NodeRef(TASK, str(task["gid"]))
            refs.append(ref)
            when = parse_time(task.get("modified_at"))
            if when is not None:
                dates[ref] = when
        offset = (body.get("next_page") or {}).get("offset")
        if not offset:
            return WalkPage(refs, None, watermark=start, dates=dates)
        return WalkPage(refs, json.dumps({"offset": offset, "start": start}), dates=dates)

    def fetch(self, conn: Connection, ref: NodeRef) -> Node | None:
        gid = quote(ref.node_id, safe="")
        if not gid:
            raise Unrecoverable("asana: empty task gid")
        fields = "name,notes,modified_at,permalink_url,parent"
        with closing(_client(conn)) as client:
            try:
                task = _body(client.request("GET", f"/tasks/{gid}?opt_fields={fields}"))["data"]
                stories = _pages(
                    client,
                    f"/tasks/{gid}/stories",
                    {"opt_fields": "type,text,created_by.name"},
                )
            except NotFound:
                return None
        comments = [
            f"{(s.get('created_by') or {}).get('name') or 'someone'}: {s.get('text') or ''}"
            for s in stories
            if s.get("type") == "comment"
        ]
        parent = task.get("parent") or None
        return Node(
            ref=ref,
            title=str(task.get("name") or ref.node_id),
            text="\n\n".join([task.get("notes") or "", *comments]).strip(),
            url=task.get("permalink_url"),
            synchronization_date=parse_time(task.get("modified_at")) or datetime.now(UTC),
            parent=NodeRef(TASK, str(parent["gid"])) if parent and parent.get("gid") else None,
        )


SOURCE: NodeSource = AsanaSource()


def _state(checkpoint: str | None) -> dict[str, Any]:
    try:
        raw = json.loads(checkpoint) if checkpoint else {}
    except ValueError:
        raw = {}
    return raw if isinstance(raw, dict) else {}


def _body(response: requests.Response) -> dict[str, Any]:
    try:
        body = response.json()
    except ValueError as exc:
        raise Retryable(f"asana: unreadable JSON body: {exc}") from exc
    if not isinstance(body, dict) or "data" not in body:
        raise Retryable("asana: an answer without `data`")
    return body


def _data(body: dict[str, Any]) -> list[dict[str, Any]]:
    data = body["data"]
    if not isinstance(data, list):
        raise Retryable("asana: a listing whose `data` is not a list")
    return [item for item in data if isinstance(item, dict) and item.get("gid")]


def _pages(client: NodeClient, path: str, query: dict[str, Any]) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    offset: str | None = None
    while True:
        params = {**query, "limit": LIMIT, **({"offset": offset} if offset else {})}
        body = _body(client.request("GET", f"{path}?{urlencode(params)}"))
        items += _data(body)
        offset = (body.get("next_page") or {}).get("offset")
        if not offset:
            return items


def _server_time(response: requests.Response) -> str:
    stamp = response.headers.get("Date")
    try:
        when = parsedate_to_datetime(stamp) if stamp else datetime.now(UTC)
    except (TypeError, ValueError):
        when = datetime.now(UTC)
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.000Z")


def _client(conn: Connection) -> NodeClient:
    token = conn.credentials.get("access_token") or conn.credentials.get("token")
    if not token:
        raise Unrecoverable(f"asana connection {conn.connection_id}: no access_token")

    def inspect(response: requests.Response, what: str) -> None:
        until = retry_after(response)
        if response.status_code == 429 and until is not None:
            raise blocked(conn, until, f"asana, {what}")

    base = (conn.base_url or DEFAULT_BASE_URL).rstrip("/") + "/api/1.0"
    return NodeClient(
        base, inspect=inspect, headers={"Authorization": f"Bearer {token}"}, timeout=conn.timeout
    )
