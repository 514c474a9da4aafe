"""Linear: a team's issues and comments over GraphQL, and Linear's webhooks.

Protocol (``POST /graphql``; ``Authorization: <api key>``, or ``Bearer <token>`` for OAuth):

* roots: ``teams(first, after) { nodes { id key name } pageInfo { hasNextPage endCursor } }``.
* walk: two phases, each a cursor walk ordered by ``updatedAt`` (most recent first):
  ``issues(filter: {team: {id: {eq}}, updatedAt: {gt: since}})`` then
  ``comments(filter: {issue: {team: {id: {eq}}}, updatedAt: {gt: since}})``. Cursors are
  keyset cursors: an item edited during the walk moves before the cursor, and the watermark
  (the latest ``updatedAt`` listed, on Linear's clock) makes the next walk list it.
* fetch: ``issue(id)`` (identifier, title, description) or ``comment(id)`` (body, its issue
  as the parent). "Entity not found" means gone.
* rate limits: ``X-RateLimit-Requests-Remaining/Reset`` and
  ``X-RateLimit-Complexity-Remaining/Reset`` (epoch ms) are recorded on the connection; a
  ``RATELIMITED`` error (HTTP 400 or 429) is a ``Delay`` until the reset of the budget that
  is spent (the complexity one when what is left is under the query's ``X-Complexity``).
* webhooks: ``Linear-Signature`` (hex HMAC-SHA256 of the body), the body's
  ``webhookTimestamp`` within :data:`WEBHOOK_WINDOW` of now, ``Linear-Delivery``.

Node ids are Linear's UUIDs: ``LinearTeam``, ``LinearIssue``, ``LinearComment``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping
from contextlib import closing
from datetime import UTC, datetime, timedelta
from typing import Any

import requests

from services.connectors.node_http import (
    NodeClient,
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

DEFAULT_BASE_URL = "https://api.linear.app"
PAGE_SIZE = 100
WEBHOOK_WINDOW = timedelta(seconds=60)
#: A RATELIMITED answer without any reset header: come back in a minute.
DEFAULT_WAIT = 60.0

TEAM = "LinearTeam"
ISSUE = "LinearIssue"
COMMENT = "LinearComment"

TEAMS = """
query Teams($first: Int!, $after: String) {
  teams(first: $first, after: $after) {
    nodes { id key name }
    pageInfo { hasNextPage endCursor }
  }
}"""

ISSUE_PAGE = """
query TeamIssues($first: Int!, $after: String, $filter: IssueFilter) {
  issues(first: $first, after: $after, filter: $filter, orderBy: updatedAt) {
    nodes { id updatedAt }
    pageInfo { hasNextPage endCursor }
  }
}"""

COMMENT_PAGE = """
query TeamComments($first: Int!, $after: String, $filter: CommentFilter) {
  comments(first: $first, after: $after, filter: $filter, orderBy: updatedAt) {
    nodes { id updatedAt issue { id } }
    pageInfo { hasNextPage endCursor }
  }
}"""

ISSUE_QUERY = """
query Issue($id: String!) {
  issue(id: $id) { id identifier title description url updatedAt team { id } }
}"""

COMMENT_QUERY = """
query Comment($id: String!) {
  comment(id: $id) { id body url updatedAt issue { id identifier title } }
}"""


class LinearSource:
    """Issues and comments of the connection's Linear teams."""

    source = "linear"
    root_node_types: tuple[str, ...] = (TEAM,)
    indexable_node_types: tuple[str, ...] = (ISSUE, COMMENT)

    def list_roots(self, conn: Connection) -> list[NodeRef]:
        roots: list[NodeRef] = []
        after: str | None = None
        with closing(_client(conn)) as client:
            while True:
                data = _query(client, TEAMS, {"first": PAGE_SIZE, "after": after})
                connection = data["teams"]
                roots += [NodeRef(TEAM, str(team["id"])) for team in connection["nodes"]]
                after = _next_cursor(connection, "teams")
                if after is None:
                    return roots

    def walk(
        self, conn: Connection, root: NodeRef, checkpoint: str | None, since: str | None = None
    ) -> WalkPage:
        state = _WalkState.decode(checkpoint, since)
        team = {"id": {"eq": root.node_id}}
        changed = {"updatedAt": {"gt": state.since}} if state.since else {}
        first = int(conn.settings.get("page_size") or PAGE_SIZE)
        with closing(_client(conn)) as client:
            if state.phase == "issues":
                variables = {
                    "first": first,
                    "after": state.after,
                    "filter": {"team": team, **changed},
                }
                connection = _query(client, ISSUE_PAGE, variables)["issues"]
                kind = ISSUE
            else:
                comment_filter = {"issue": {"team": team}, **changed}
                variables = {"first": first, "after": state.after, "filter": comment_filter}
                connection = _query(client, COMMENT_PAGE, variables)["comments"]
                kind = COMMENT
        refs: list[NodeRef] = []
        dates: dict[NodeRef, datetime] = {}
        for node in connection["nodes"]:
            ref = NodeRef(kind, str(node["id"]))
            refs.append(ref)
            updated = parse_time(node.get("updatedAt"))
            if updated is not None:
                dates[ref] = updated
                state.high = max(state.high or "", str(node["updatedAt"]))
        after = _next_cursor(connection, state.phase)
        if after is not None:
            state.after = after
        elif state.phase == "issues":
            state.phase, state.after = "comments", None
        else:
            return WalkPage(refs, None, watermark=state.high or state.since, dates=dates)
        return WalkPage(refs, state.encode(), dates=dates)

    def fetch(self, conn: Connection, ref: NodeRef) -> Node | None:
        with closing(_client(conn)) as client:
            try:
                if ref.node_type == COMMENT:
                    comment = _query(client, COMMENT_QUERY, {"id": ref.node_id})["comment"]
                    return _comment_node(ref, comment)
                issue = _query(client, ISSUE_QUERY, {"id": ref.node_id})["issue"]
            except NotFound:
                return None
        identifier = issue.get("identifier") or ""
        return Node(
            ref=ref,
            title=f"{identifier} {issue.get('title') or ''}".strip(),
            text=f"{issue.get('title') or ''}\n\n{issue.get('description') or ''}".strip(),
            url=issue.get("url"),
            synchronization_date=parse_time(issue.get("updatedAt")) or datetime.now(UTC),
        )


SOURCE: NodeSource = LinearSource()


class _WalkState:
    def __init__(self, phase: str, after: str | None, since: str | None, high: str | None) -> None:
        self.phase, self.after, self.since, self.high = phase, after, since, high

    @classmethod
    def decode(cls, checkpoint: str | None, since: str | None) -> _WalkState:
        if checkpoint:
            try:
                raw = json.loads(checkpoint)
                if raw.get("phase") in ("issues", "comments"):
                    return cls(raw["phase"], raw.get("after"), raw.get("since"), raw.get("high"))
            except (ValueError, AttributeError):
                pass
        return cls("issues", None, since, None)

    def encode(self) -> str:
        return json.dumps(
            {"phase": self.phase, "after": self.after, "since": self.since, "high": self.high}
        )


def _comment_node(ref: NodeRef, comment: Mapping[str, Any]) -> Node:
    issue = comment.get("issue") or {}
    about = f"{issue.get('identifier') or ''} {issue.get('title') or ''}".strip()
    return Node(
        ref=ref,
        title=f"Comment on {about}" if about else "Comment",
        text=str(comment.get("body") or ""),
        url=comment.get("url"),
        synchronization_date=parse_time(comment.get("updatedAt")) or datetime.now(UTC),
        parent=NodeRef(ISSUE, str(issue["id"])) if issue.get("id") else None,
    )


def _client(conn: Connection) -> NodeClient:
    api_key = conn.credentials.get("api_key")
    token = conn.credentials.get("access_token")
    if not api_key and not token:
        raise Unrecoverable(f"linear connection {conn.connection_id}: no api_key configured")
    authorization = str(api_key) if api_key else f"Bearer {token}"

    def inspect(response: requests.Response, what: str) -> None:
        cost = int_header(response, "X-Complexity") or 1
        spent: list[datetime] = []  # resets of the budgets this answer says are spent
        resets: list[datetime] = []
        for budget, needed in (("Requests", 1), ("Complexity", cost)):
            remaining = int_header(response, f"X-RateLimit-{budget}-Remaining")
            reset_at = epoch_header(response, f"X-RateLimit-{budget}-Reset", millis=True)
            conn.record_quota(remaining, reset_at)
            if reset_at is not None:
                resets.append(reset_at)
                if remaining is not None and remaining < needed:
                    spent.append(reset_at)
        if response.status_code in (400, 429) and "RATELIMITED" in _codes(response):
            until = retry_after(response) or max(spent or resets, default=None)
            if until is None:
                until = datetime.now(UTC) + timedelta(seconds=DEFAULT_WAIT)
            raise blocked(conn, until, f"linear, {what}")
        if response.status_code == 400 and "AUTHENTICATION_ERROR" in _codes(response):
            raise Unrecoverable(f"{what}: HTTP 400 (invalid credentials)")

    headers = {"Authorization": authorization, "Content-Type": "application/json"}
    return NodeClient(
        conn.base_url or DEFAULT_BASE_URL, inspect=inspect, headers=headers, timeout=conn.timeout
    )


def _codes(response: requests.Response) -> set[str]:
    try:
        body = response.json()
    except ValueError:
        return set()
    errors = body.get("errors") if isinstance(body, dict) else None
    return {
        str((e.get("extensions") or {}).get("code")) for e in errors or [] if isinstance(e, dict)
    }


def _query(client: NodeClient, query: str, variables: Mapping[str, Any]) -> dict[str, Any]:
    body = client.post("/graphql", {"query": query, "variables": dict(variables)})
    if not isinstance(body, dict):
        raise Retryable("POST /graphql: the answer is not a JSON object")
    errors = [e for e in body.get("errors") or [] if isinstance(e, dict)]
    for error in errors:
        code = str((error.get("extensions") or {}).get("code") or "")
        message = str(error.get("message") or "")
        if code == "RATELIMITED":
            raise Retryable("POST /graphql: RATELIMITED without a reset")
        if message.startswith("Entity not found") or code == "ENTITY_NOT_FOUND":
            raise NotFound(f"POST /graphql: {message}")
        if code in ("AUTHENTICATION_ERROR", "FORBIDDEN"):
            raise Unrecoverable(f"POST /graphql: {code}: {message}")
        if code == "INTERNAL_SERVER_ERROR":
            raise Retryable(f"POST /graphql: {message}")
    data = body.get("data")
    if errors or not isinstance(data, dict):
        messages = "; ".join(str(e.get("message")) for e in errors) or "no data"
        raise Unrecoverable(f"POST /graphql: {messages}")
    return data


def _next_cursor(connection: Mapping[str, Any], what: str) -> str | None:
    info = connection.get("pageInfo") or {}
    if not info.get("hasNextPage"):
        return None
    cursor = info.get("endCursor")
    if not cursor:
        raise Retryable(f"linear {what}: hasNextPage without endCursor")
    return str(cursor)


# -- webhooks ---------------------------------------------------------------------------


def verify(headers: Mapping[str, str], body: bytes, secret: str, now: datetime) -> bool:
    """``Linear-Signature`` is the hex HMAC-SHA256 of the body with ``secret``, and the
    body's ``webhookTimestamp`` (ms) is within :data:`WEBHOOK_WINDOW` of ``now``."""
    given = header(headers, "Linear-Signature") or ""
    expected = hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    if not secret or not hmac.compare_digest(given.encode(), expected.encode()):
        return False
    try:
        stamp = json.loads(body)["webhookTimestamp"]
        sent = datetime.fromtimestamp(float(stamp) / 1000, UTC)
    except (ValueError, KeyError, TypeError, OverflowError):
        return False
    return abs(now - sent) <= WEBHOOK_WINDOW


def parse(headers: Mapping[str, str], body: bytes) -> WebhookEvent:
    """The issue or comment an ``Issue`` / ``Comment`` delivery touched (others: none)."""
    delivery = header(headers, "Linear-Delivery")
    if not delivery:
        raise MalformedWebhook("linear webhook without Linear-Delivery")
    what = f"linear webhook {delivery}"
    payload = webhook_payload(body, what)
    kind, data = payload.get("type"), payload.get("data")
    if not isinstance(kind, str) or not isinstance(data, dict):
        raise MalformedWebhook(f"{what}: no type and data object")
    ident = data.get("id")
    if not isinstance(ident, str) or not ident:
        raise MalformedWebhook(f"{what}: no data.id")
    node_type = {"Issue": ISSUE, "Comment": COMMENT}.get(kind)
    if node_type is None:
        return storable_event(WebhookEvent(delivery, [], kind=kind), what)
    team = (
        data.get("teamId")
        or as_object(data.get("team")).get("id")
        or as_object(data.get("issue")).get("teamId")
    )
    root = NodeRef(TEAM, team) if isinstance(team, str) and team else None
    ref = NodeRef(node_type, ident)
    if payload.get("action") == "remove":
        return storable_event(WebhookEvent(delivery, [], root=root, removed=[ref], kind=kind), what)
    return storable_event(WebhookEvent(delivery, [ref], root=root, kind=kind), what)


#: mypy holds the webhook functions to the contract's signatures.
_CHECKED: tuple[WebhookVerify, WebhookParse] = (verify, parse)
