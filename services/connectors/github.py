"""GitHub: a repository's issues and pull requests (with their comments), and its webhooks.

Protocol (REST, ``Authorization: Bearer <token>``, ``X-GitHub-Api-Version: 2022-11-28``):

* roots: ``GET /user/repos`` (``link`` pagination), or ``settings.repositories``.
* walk: ``GET /repos/{owner}/{repo}/issues?state=all&sort=updated&direction=asc&since=``,
  100 a page; pull requests come in the same listing (they carry ``pull_request``). Pages
  restart from the last ``updated_at`` seen (see :class:`.node_http.UpdatedCursor`), so an
  issue edited during the walk is not skipped; the watermark is the last ``updated_at``.
  This relies on ``since`` being inclusive (updated at or after, as GitHub answers; the
  reference's wording is "updated after").
* fetch: ``GET /repos/{owner}/{repo}/issues/{number}`` and its ``/comments`` (``link``
  pagination); the text is the body, then each comment.
* rate limits: every answer's ``x-ratelimit-remaining`` / ``x-ratelimit-reset`` is recorded
  on the connection; 403/429 with ``retry-after`` (secondary limit) or with remaining 0
  (primary limit) is a ``Delay`` until then; a secondary limit without ``retry-after`` (a 429,
  or a 403 saying so) waits at least a minute, then exponentially longer with jitter while it
  repeats, up to ``rate_limit_backoff_max_seconds`` (the reference: "wait for at least one
  minute ... an exponentially increasing amount of time between retries"); another 403 is
  ``Unrecoverable`` (permissions).
* webhooks: ``X-Hub-Signature-256`` (HMAC-SHA256 of the raw body), ``X-GitHub-Delivery``;
  ``issues``, ``issue_comment``, ``pull_request`` and pull request review events.

Node ids: ``GithubRepo`` ``owner/name``; ``GithubIssue`` / ``GithubPullRequest``
``owner/name#12``.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from contextlib import closing
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

import requests

from services.connectors.node_http import (
    NodeClient,
    UpdatedCursor,
    backed_off,
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

DEFAULT_BASE_URL = "https://api.github.com"
API_VERSION = "2022-11-28"
PER_PAGE = 100
#: Secondary limit without retry-after: GitHub asks for at least a minute.
SECONDARY_WAIT = 60.0
#: Webhook events whose payload names a pull request under ``pull_request``.
PULL_EVENTS = ("pull_request", "pull_request_review", "pull_request_review_comment")

REPO = "GithubRepo"
ISSUE = "GithubIssue"
PULL = "GithubPullRequest"


class GithubSource:
    """Issues and pull requests of the connection's repositories."""

    source = "github"
    root_node_types: tuple[str, ...] = (REPO,)
    indexable_node_types: tuple[str, ...] = (ISSUE, PULL)

    def list_roots(self, conn: Connection) -> list[NodeRef]:
        named = conn.settings.get("repositories")
        if named:
            return [NodeRef(REPO, str(name)) for name in named]
        roots: list[NodeRef] = []
        with closing(_client(conn)) as client:
            path: str | None = f"/user/repos?{urlencode({'per_page': PER_PAGE})}"
            while path:
                response = client.request("GET", path)
                roots += [NodeRef(REPO, repo["full_name"]) for repo in _json(response, path)]
                path = _next_link(response)
        return roots

    def walk(
        self, conn: Connection, root: NodeRef, checkpoint: str | None, since: str | None = None
    ) -> WalkPage:
        cursor = UpdatedCursor.decode(checkpoint, since)
        query: dict[str, Any] = {
            "state": "all",
            "sort": "updated",
            "direction": "asc",
            "per_page": int(conn.settings.get("per_page") or PER_PAGE),
            "page": cursor.page,
        }
        if cursor.since:
            query["since"] = cursor.since
        path = f"/repos/{_repo(root.node_id)}/issues?{urlencode(query)}"
        with closing(_client(conn)) as client:
            response = client.request("GET", path)
            items = _json(response, path)
        listed = [(str(item["number"]), str(item["updated_at"])) for item in items]
        by_number = {str(item["number"]): item for item in items}
        refs: list[NodeRef] = []
        dates: dict[NodeRef, datetime] = {}
        for number, updated in cursor.fresh(listed):
            item = by_number[number]
            ref = NodeRef(PULL if "pull_request" in item else ISSUE, f"{root.node_id}#{number}")
            refs.append(ref)
            when = parse_time(updated)
            if when is not None:
                dates[ref] = when
        after = cursor.advance(listed, _next_link(response) is not None)
        if after is None:
            return WalkPage(refs, None, watermark=cursor.high_water(listed), dates=dates)
        return WalkPage(refs, after.encode(), dates=dates)

    def fetch(self, conn: Connection, ref: NodeRef) -> Node | None:
        repo, _, number = ref.node_id.rpartition("#")
        if not repo or not number.isdigit():
            raise Unrecoverable(f"github: bad node id {ref.node_id!r} (owner/name#number)")
        base = f"/repos/{_repo(repo)}/issues/{number}"
        with closing(_client(conn)) as client:
            try:
                issue = client.get(base)
                comments = _comments(client, f"{base}/comments?per_page={PER_PAGE}")
            except NotFound:
                return None
        updated = parse_time(issue.get("updated_at")) or datetime.now(UTC)
        kind = PULL if "pull_request" in issue else ISSUE
        text = "\n\n".join([issue.get("body") or "", *comments]).strip()
        return Node(
            ref=NodeRef(kind, ref.node_id),
            title=f"#{number} {issue.get('title') or ''}".strip(),
            text=text,
            url=issue.get("html_url"),
            synchronization_date=updated,
        )


SOURCE: NodeSource = GithubSource()


def _client(conn: Connection) -> NodeClient:
    token = conn.credentials.get("token") or conn.credentials.get("access_token")
    if not token:
        raise Unrecoverable(f"github connection {conn.connection_id}: no token configured")
    headers = {
        "Authorization": f"Bearer {token}",
        "Accept": "application/vnd.github+json",
        "X-GitHub-Api-Version": API_VERSION,
    }
    base_url = conn.base_url or DEFAULT_BASE_URL

    def inspect(response: requests.Response, what: str) -> None:
        remaining = int_header(response, "x-ratelimit-remaining")
        reset_at = epoch_header(response, "x-ratelimit-reset")
        conn.record_quota(remaining, reset_at)
        if response.status_code not in (403, 429):
            return
        wait = retry_after(response)
        if wait is not None:
            raise blocked(conn, wait, f"github secondary limit, {what}")
        if remaining == 0 and reset_at is not None:
            raise blocked(conn, reset_at, f"github primary limit, {what}")
        if response.status_code == 429 or "secondary rate limit" in response.text.lower():
            raise backed_off(conn, SECONDARY_WAIT, f"github secondary limit, {what}")

    return NodeClient(base_url, inspect=inspect, headers=headers, timeout=conn.timeout)


def _repo(full_name: str) -> str:
    owner, _, name = full_name.partition("/")
    if not owner or not name or "/" in name:
        raise Unrecoverable(f"github: bad repository {full_name!r} (owner/name)")
    return full_name


def _json(response: requests.Response, what: str) -> list[dict[str, Any]]:
    try:
        body = response.json()
    except ValueError as exc:
        raise Retryable(f"GET {what}: unreadable JSON body: {exc}") from exc
    if not isinstance(body, list):
        raise Retryable(f"GET {what}: expected a list, got {type(body).__name__}")
    return body


def _next_link(response: requests.Response) -> str | None:
    link = response.links.get("next")
    return link.get("url") if link else None


def _comments(client: NodeClient, path: str) -> list[str]:
    texts: list[str] = []
    next_path: str | None = path
    while next_path:
        response = client.request("GET", next_path)
        for comment in _json(response, next_path):
            author = (comment.get("user") or {}).get("login") or "someone"
            texts.append(f"{author}: {comment.get('body') or ''}")
        next_path = _next_link(response)
    return texts


# -- webhooks ---------------------------------------------------------------------------


def verify(headers: Mapping[str, str], body: bytes, secret: str, now: datetime) -> bool:
    """``X-Hub-Signature-256`` is ``sha256=`` + the HMAC-SHA256 of the body with ``secret``."""
    given = header(headers, "X-Hub-Signature-256") or ""
    expected = "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()
    return bool(secret) and hmac.compare_digest(given.encode(), expected.encode())


def parse(headers: Mapping[str, str], body: bytes) -> WebhookEvent:
    """The issue or pull request an ``issues``, ``issue_comment`` or ``pull_request``
    delivery touched (other events: no refs)."""
    delivery = header(headers, "X-GitHub-Delivery")
    event = header(headers, "X-GitHub-Event") or ""
    if not delivery:
        raise MalformedWebhook("github webhook without X-GitHub-Delivery")
    what = f"github webhook {delivery}"
    payload = webhook_payload(body, what)
    full_name = as_object(payload.get("repository")).get("full_name")
    if not isinstance(full_name, str) or not full_name:
        raise MalformedWebhook(f"{what}: no repository full_name")
    root = NodeRef(REPO, full_name)
    on_pull = event in PULL_EVENTS
    item = payload.get("pull_request") if on_pull else payload.get("issue")
    if event not in ("issues", "issue_comment", *PULL_EVENTS) or not isinstance(item, dict):
        return storable_event(WebhookEvent(delivery, [], root=root, kind=event), what)
    number = item.get("number") or payload.get("number")
    if not isinstance(number, int) or isinstance(number, bool):
        raise MalformedWebhook(f"{what}: no issue number")
    pull = on_pull or "pull_request" in item
    ref = NodeRef(PULL if pull else ISSUE, f"{full_name}#{number}")
    if event == "issues" and payload.get("action") == "deleted":
        return storable_event(
            WebhookEvent(delivery, [], root=root, removed=[ref], kind=event), what
        )
    return storable_event(WebhookEvent(delivery, [ref], root=root, kind=event), what)


#: mypy holds the webhook functions to the contract's signatures.
_CHECKED: tuple[WebhookVerify, WebhookParse] = (verify, parse)
