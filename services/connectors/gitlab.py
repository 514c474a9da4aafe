"""GitLab: a project's issues and merge requests (with their notes), and GitLab's webhooks.

Protocol (REST v4 under ``/api/v4``, ``PRIVATE-TOKEN: <token>``):

* roots: ``GET /projects?membership=true`` (``x-next-page`` pagination), or
  ``settings.projects``.
* walk: ``GET /projects/:id/issues`` then ``/merge_requests``, each ``scope=all&state=all&
  order_by=updated_at&sort=asc&updated_after=``, 100 a page; pages restart from the last
  ``updated_at`` seen (:class:`.node_http.UpdatedCursor`), so an item edited during the walk is
  not skipped. The watermark is the latest ``updated_at`` of both listings.
* fetch: ``GET /projects/:id/issues/:iid`` (or ``merge_requests``) and its ``/notes``
  (``sort=asc``); system notes ("changed the description") are left out.
* rate limits: ``RateLimit-Remaining`` / ``RateLimit-Reset`` (epoch seconds) recorded on the
  connection; 429 is a ``Delay`` until ``Retry-After`` (else the reset, else a minute).
* webhooks: ``X-Gitlab-Token`` equals the secret; the replay key is ``Idempotency-Key``
  (kept across retries), ``X-Gitlab-Event-UUID`` only the chain id (shared by recursive
  webhooks); ``issue``, ``merge_request`` and ``note`` events.

Node ids: ``GitlabProject`` the project id; ``GitlabIssue`` ``<project id>#<iid>``;
``GitlabMergeRequest`` ``<project id>!<iid>``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping
from contextlib import closing
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import quote, urlencode

import requests

from services.connectors.node_http import (
    NodeClient,
    UpdatedCursor,
    blocked,
    epoch_header,
    int_header,
    parse_time,
    retry_after,
)
from services.connectors.nodes import (
    Connection,
    MalformedWebhook,
    Node,
    NodeRef,
    NodeSource,
    WalkPage,
    WebhookEvent,
    WebhookParse,
    WebhookVerify,
    as_object,
    header,
    storable_event,
    webhook_payload,
)
from shared.errors import Retryable, Unrecoverable
from shared.http import NotFound

DEFAULT_BASE_URL = "https://gitlab.com"
PER_PAGE = 100
DEFAULT_WAIT = 60.0

PROJECT = "GitlabProject"
ISSUE = "GitlabIssue"
MERGE_REQUEST = "GitlabMergeRequest"
#: (listing path, node type, id separator) per phase of a walk.
PHASES = (("issues", ISSUE, "#"), ("merge_requests", MERGE_REQUEST, "!"))


class GitlabSource:
    """Issues and merge requests of the connection's GitLab projects."""

    source = "gitlab"
    root_node_types: tuple[str, ...] = (PROJECT,)
    indexable_node_types: tuple[str, ...] = (ISSUE, MERGE_REQUEST)

    def list_roots(self, conn: Connection) -> list[NodeRef]:
        named = conn.settings.get("projects")
        if named:
            return [NodeRef(PROJECT, str(ident)) for ident in named]
        roots: list[NodeRef] = []
        with closing(_client(conn)) as client:
            page: str | None = "1"
            while page:
                query = urlencode({"membership": "true", "per_page": PER_PAGE, "page": page})
                response = client.request("GET", f"/projects?{query}")
                roots += [NodeRef(PROJECT, str(p["id"])) for p in _list(response, "projects")]
                page = response.headers.get("x-next-page") or None
        return roots

    def walk(
        self, conn: Connection, root: NodeRef, checkpoint: str | None, since: str | None = None
    ) -> WalkPage:
        phase, first_since, high, cursor = _decode(checkpoint, since)
        listing, node_type, separator = PHASES[phase]
        query: dict[str, Any] = {
            "scope": "all",
            "state": "all",
            "order_by": "updated_at",
            "sort": "asc",
            "per_page": int(conn.settings.get("per_page") or PER_PAGE),
            "page": cursor.page,
        }
        if cursor.since:
            query["updated_after"] = cursor.since
        path = f"/projects/{_project(root.node_id)}/{listing}?{urlencode(query)}"
        with closing(_client(conn)) as client:
            response = client.request("GET", path)
            items = _list(response, listing)
        listed = [(str(item["iid"]), str(item["updated_at"])) for item in items]
        refs: list[NodeRef] = []
        dates: dict[NodeRef, datetime] = {}
        for iid, updated in cursor.fresh(listed):
            ref = NodeRef(node_type, f"{root.node_id}{separator}{iid}")
            refs.append(ref)
            when = parse_time(updated)
            if when is not None:
                dates[ref] = when
        seen = cursor.high_water(listed)
        high = max(high or "", seen or "") or None
        after = cursor.advance(listed, bool(response.headers.get("x-next-page")))
        if after is None and phase + 1 < len(PHASES):
            after, phase = UpdatedCursor(since=first_since), phase + 1
        if after is None:
            return WalkPage(refs, None, watermark=high, dates=dates)
        state = {"phase": phase, "since": first_since, "high": high, "cursor": after.encode()}
        return WalkPage(refs, json.dumps(state), dates=dates)

    def fetch(self, conn: Connection, ref: NodeRef) -> Node | None:
        separator = "!" if ref.node_type == MERGE_REQUEST else "#"
        listing = "merge_requests" if ref.node_type == MERGE_REQUEST else "issues"
        project, _, iid = ref.node_id.rpartition(separator)
        if not project or not iid.isdigit():
            raise Unrecoverable(f"gitlab: bad node id {ref.node_id!r}")
        base = f"/projects/{_project(project)}/{listing}/{iid}"
        with closing(_client(conn)) as client:
            try:
                item = client.get(base)
                notes = _notes(client, f"{base}/notes")
            except NotFound:
                return None
        text = "\n\n".join([item.get("description") or "", *notes]).strip()
        return Node(
            ref=ref,
            title=f"{separator}{iid} {item.get('title') or ''}".strip(),
            text=text,
            url=item.get("web_url"),
            synchronization_date=parse_time(item.get("updated_at")) or datetime.now(UTC),
        )


SOURCE: NodeSource = GitlabSource()


def _decode(
    checkpoint: str | None, since: str | None
) -> tuple[int, str | None, str | None, UpdatedCursor]:
    if checkpoint:
        try:
            raw = json.loads(checkpoint)
            phase = int(raw["phase"])
            if 0 <= phase < len(PHASES):
                first = raw.get("since")
                return phase, first, raw.get("high"), UpdatedCursor.decode(raw.get("cursor"), first)
        except (ValueError, KeyError, TypeError):
            pass
    return 0, since, None, UpdatedCursor(since=since)


def _client(conn: Connection) -> NodeClient:
    token = conn.credentials.get("token") or conn.credentials.get("private_token")
    if not token:
        raise Unrecoverable(f"gitlab connection {conn.connection_id}: no token configured")

    def inspect(response: requests.Response, what: str) -> None:
        reset_at = epoch_header(response, "RateLimit-Reset")
        conn.record_quota(int_header(response, "RateLimit-Remaining"), reset_at)
        if response.status_code == 429:
            until = retry_after(response) or reset_at
            if until is None or until <= datetime.now(UTC):
                until = datetime.now(UTC) + timedelta(seconds=DEFAULT_WAIT)
            raise blocked(conn, until, f"gitlab, {what}")

    base = (conn.base_url or DEFAULT_BASE_URL).rstrip("/") + "/api/v4"
    return NodeClient(
        base, inspect=inspect, headers={"PRIVATE-TOKEN": str(token)}, timeout=conn.timeout
    )


def _project(ident: str) -> str:
    if not ident:
        raise Unrecoverable("gitlab: empty project id")
    return ident if ident.isdigit() else quote(ident, safe="")


def _list(response: requests.Response, what: str) -> list[dict[str, Any]]:
    try:
        body = response.json()
    except ValueError as exc:
        raise Retryable(f"GET {what}: unreadable JSON body: {exc}") from exc
    if not isinstance(body, list):
        raise Retryable(f"GET {what}: expected a list, got {type(body).__name__}")
    return body


def _notes(client: NodeClient, path: str) -> list[str]:
    texts: list[str] = []
    page: str | None = "1"
    while page:
        query = urlencode(
            {"sort": "asc", "order_by": "created_at", "per_page": PER_PAGE, "page": page}
        )
        response = client.request("GET", f"{path}?{query}")
        for note in _list(response, path):
            if not note.get("system"):
                author = (note.get("author") or {}).get("username") or "someone"
                texts.append(f"{author}: {note.get('body') or ''}")
        page = response.headers.get("x-next-page") or None
    return texts


# -- webhooks ---------------------------------------------------------------------------


def verify(headers: Mapping[str, str], body: bytes, secret: str, now: datetime) -> bool:
    """``X-Gitlab-Token`` carries the secret itself (compared in constant time)."""
    given = header(headers, "X-Gitlab-Token") or ""
    return bool(secret) and hmac.compare_digest(given.encode(), secret.encode())


def parse(headers: Mapping[str, str], body: bytes) -> WebhookEvent:
    """The issue or merge request an ``issue``, ``merge_request`` or ``note`` delivery
    touched (other events: no refs)."""
    chain = header(headers, "X-Gitlab-Event-UUID") or ""
    delivery = _delivery_id(headers, body)
    what = f"gitlab webhook {chain or delivery}"
    payload = webhook_payload(body, what)
    kind, project_id = payload.get("object_kind"), as_object(payload.get("project")).get("id")
    if not isinstance(kind, str) or not _is_id(project_id):
        raise MalformedWebhook(f"{what}: no object_kind and project id")
    project = str(project_id)
    attributes = as_object(payload.get("object_attributes"))
    root = NodeRef(PROJECT, project)
    if kind in ("issue", "work_item", "merge_request"):
        iid = attributes.get("iid")
        merge = kind == "merge_request"
    elif kind == "note" and attributes.get("noteable_type") in ("Issue", "MergeRequest"):
        merge = attributes["noteable_type"] == "MergeRequest"
        iid = as_object(payload.get("merge_request" if merge else "issue")).get("iid")
    else:
        return storable_event(
            WebhookEvent(delivery, [], root=root, kind=kind, chain_id=chain), what
        )
    if not _is_id(iid) or isinstance(iid, str):
        raise MalformedWebhook(f"{what}: no iid")
    ref = (
        NodeRef(MERGE_REQUEST, f"{project}!{iid}") if merge else NodeRef(ISSUE, f"{project}#{iid}")
    )
    return storable_event(WebhookEvent(delivery, [ref], root=root, kind=kind, chain_id=chain), what)


def _delivery_id(headers: Mapping[str, str], body: bytes) -> str:
    """The replay key of a delivery: ``Idempotency-Key``, which GitLab keeps across the
    retries of one event and nothing else; from a GitLab without it (before 17.4), the
    body's digest (a retry sends the same body). Never ``X-Gitlab-Event-UUID``: recursive
    webhooks share it, so a second, different event would be dropped as a replay
    (https://docs.gitlab.com/user/project/integrations/webhooks/#delivery-headers)."""
    key = header(headers, "Idempotency-Key")
    return key or "sha256:" + hashlib.sha256(body).hexdigest()


def _is_id(value: Any) -> bool:
    """A project id or iid as a payload may carry it: a whole number (not a boolean) or a
    non-empty string."""
    if isinstance(value, bool):
        return False
    return isinstance(value, int) or (isinstance(value, str) and value != "")


#: mypy holds the webhook functions to the contract's signatures.
_CHECKED: tuple[WebhookVerify, WebhookParse] = (verify, parse)
