"""A local GraphQL server speaking (a subset of) Linear's API: teams, issues, comments.

The schema is executed by graphql-core, so a client's query is validated and answered as a
real GraphQL server would (introspection included: ``gql`` can fetch the schema). Type and
field names follow Linear's published schema
(https://studio.apollographql.com/public/Linear-API/variant/current/schema/reference):
``Query.teams/team/issues/issue/comments/comment``, ``Team.issues``, ``Issue.comments``,
``*Connection { nodes edges pageInfo }``, ``PageInfo { hasNextPage endCursor }``,
``PaginationOrderBy { createdAt updatedAt }``, ``IssueFilter``, ``CommentFilter``,
``NullableIssueFilter``, ``TeamFilter``, ``IDComparator``, ``DateComparator``.

Protocol, per Linear's developer docs:

* endpoint ``POST /graphql``; ``Authorization: <api key>`` or ``Bearer <oauth token>``
  (https://linear.app/developers/graphql); otherwise 401 with an ``AUTHENTICATION_ERROR``
  GraphQL error.
* pagination (https://linear.app/developers/pagination): Relay cursors, ``first`` (default
  50, at most 250 here) / ``after``, ``pageInfo { hasNextPage endCursor }``; ``orderBy:
  updatedAt`` lists the most recently updated first. Cursors are keyset cursors, so an item
  edited during a walk moves ahead of the cursor and is not repeated.
* rate limits (https://linear.app/developers/rate-limiting): every answer carries
  ``X-RateLimit-Requests-Limit/Remaining/Reset`` and ``X-Complexity``,
  ``X-RateLimit-Complexity-Limit/Remaining/Reset`` (resets in UTC epoch milliseconds). Over
  a budget, the answer is a GraphQL error with ``extensions.code = "RATELIMITED"`` (sent
  with HTTP 400 here; clients should go by the code, not the status).
* a missing entity is ``{"data": null, "errors": [{"message": "Entity not found: Issue",
  "extensions": {"code": "INVALID_INPUT"}}]}`` with HTTP 200.
* webhooks (https://linear.app/developers/webhooks): ``Linear-Signature`` = hex HMAC-SHA256
  of the raw body, ``Linear-Delivery`` (a UUID), ``Linear-Event``; the body's
  ``webhookTimestamp`` (ms) must be within a minute: :func:`signed_delivery` builds one.

Failures: :meth:`ProtocolServer.fail` on ``/graphql`` (404, 429, 500, truncated, slow);
``request_limit`` / ``complexity_limit`` per ``rate_window`` seconds.

Large data sets are cheap: ``server.populate("ENG", issues=1000, comments=1)`` makes a team
with 1,000 issues and 1,000 comments (ids are uuid5s, ``updatedAt`` a minute apart) in a
few milliseconds; :meth:`touch` edits an issue afterwards.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from graphql import GraphQLError, graphql_sync

from testkit.fakes.linear_schema import (
    MAX_FIRST,
    SCHEMA,
    FakeComment,
    FakeIssue,
    FakeTeam,
    compare_date,
    compare_id,
    cursor,
    decode_cursor,
    error_body,
    iso,
    issue_matches,
)
from testkit.fakes.protocol_server import ProtocolServer, Reply, Request

BASE_TIME = 1_767_225_600.0  # 2026-01-01T00:00:00Z
NAMESPACE = uuid.UUID("6ca53058-9c75-4874-b9b5-000000000004")


@dataclass
class _Budget:
    limit: int | None
    window: float
    used: int = 0
    reset_at: float = field(default_factory=time.time)

    def spend(self, amount: int, now: float) -> bool:
        if now >= self.reset_at:
            self.used, self.reset_at = 0, now + self.window
        if self.limit is not None and self.used + amount > self.limit:
            return False
        self.used += amount
        return True

    def headers(self, prefix: str) -> dict[str, str]:
        limit = self.limit if self.limit is not None else 1_000_000
        return {
            f"{prefix}-Limit": str(limit),
            f"{prefix}-Remaining": str(max(0, limit - self.used)),
            f"{prefix}-Reset": str(int(self.reset_at * 1000)),
        }


class LinearServer(ProtocolServer):
    """Linear's GraphQL API over in-memory teams, issues and comments."""

    def __init__(
        self,
        api_key: str,
        *,
        organization: str = "acme",
        request_limit: int | None = None,
        complexity_limit: int | None = None,
        rate_window: float = 3600.0,
    ) -> None:
        super().__init__()
        self.api_key = api_key
        self.organization = organization
        self.teams: dict[str, FakeTeam] = {}
        self.issues: dict[str, FakeIssue] = {}
        self.comments: dict[str, FakeComment] = {}
        self.requests_budget = _Budget(request_limit, rate_window)
        self.complexity_budget = _Budget(complexity_limit, rate_window)
        self._data_lock = threading.RLock()

    # -- data ------------------------------------------------------------------------

    def team(self, key: str, name: str | None = None) -> FakeTeam:
        with self._data_lock:
            for team in self.teams.values():
                if team.key == key:
                    return team
            made = FakeTeam(str(uuid.uuid5(NAMESPACE, f"team:{key}")), key, name or key, BASE_TIME)
            self.teams[made.id] = made
            return made

    def add_issue(
        self, key: str, title: str, description: str = "", *, updated_at: float | None = None
    ) -> FakeIssue:
        team = self.team(key)
        with self._data_lock:
            number = 1 + sum(1 for i in self.issues.values() if i.team_id == team.id)
            when = time.time() if updated_at is None else updated_at
            ident = str(uuid.uuid5(NAMESPACE, f"issue:{key}-{number}"))
            issue = FakeIssue(ident, team.id, number, title, description, when, when)
            self.issues[issue.id] = issue
            return issue

    def add_comment(
        self, issue_id: str, body: str, *, updated_at: float | None = None
    ) -> FakeComment:
        with self._data_lock:
            when = time.time() if updated_at is None else updated_at
            count = sum(1 for c in self.comments.values() if c.issue_id == issue_id)
            ident = str(uuid.uuid5(NAMESPACE, f"comment:{issue_id}:{count}"))
            comment = FakeComment(ident, issue_id, body, when, when)
            self.comments[comment.id] = comment
            return comment

    def populate(self, key: str, *, issues: int, comments: int = 0) -> FakeTeam:
        """A team with ``issues`` issues of ``comments`` comments each."""
        team = self.team(key)
        with self._data_lock:
            start = sum(1 for i in self.issues.values() if i.team_id == team.id)
            for number in range(start + 1, start + issues + 1):
                when = BASE_TIME + 60 * number
                ident = str(uuid.uuid5(NAMESPACE, f"issue:{key}-{number}"))
                self.issues[ident] = FakeIssue(
                    ident,
                    team.id,
                    number,
                    f"{key}-{number}: issue {number} of team {key}",
                    f"Issue {number} of team {key}, the description.",
                    when,
                    when,
                )
                for c in range(comments):
                    cid = str(uuid.uuid5(NAMESPACE, f"comment:{ident}:{c}"))
                    self.comments[cid] = FakeComment(
                        cid, ident, f"Comment {c} on {key}-{number}", when, when
                    )
        return team

    def touch(self, issue_id: str, *, description: str | None = None) -> FakeIssue:
        with self._data_lock:
            issue = self.issues[issue_id]
            issue.updated_at = max(time.time(), issue.updated_at + 0.001)
            if description is not None:
                issue.description = description
            return issue

    def delete_issue(self, issue_id: str) -> None:
        with self._data_lock:
            self.issues.pop(issue_id, None)

    # -- protocol --------------------------------------------------------------------

    def authorized(self, request: Request) -> bool:
        header = request.headers.get("authorization", "")
        return header in (self.api_key, f"Bearer {self.api_key}")

    def status_reply(self, status: int, message: str) -> Reply:
        if status == 401:
            error = {
                "message": "Authentication required, not authenticated",
                "extensions": {"code": "AUTHENTICATION_ERROR", "type": "authentication error"},
            }
            return Reply(401, {"errors": [error]})
        return Reply(status, {"errors": [{"message": message}]})

    def route(self, request: Request) -> Reply:
        if (
            request.method != "POST"
            or request.path != "/graphql"
            or not isinstance(request.body, dict)
        ):
            return self.status_reply(404, "Not Found")
        now = time.time()
        context: dict[str, Any] = {"cost": 1}
        with self._data_lock:
            result = graphql_sync(
                SCHEMA,
                str(request.body.get("query") or ""),
                root_value=self._root(),
                context_value=context,
                variable_values=request.body.get("variables"),
                operation_name=request.body.get("operationName"),
            )
        with self._lock:
            fits = self.requests_budget.spend(1, now) and self.complexity_budget.spend(
                context["cost"], now
            )
            headers = {
                **self.requests_budget.headers("X-RateLimit-Requests"),
                **self.complexity_budget.headers("X-RateLimit-Complexity"),
                "X-Complexity": str(context["cost"]),
            }
        if not fits:
            error = {
                "message": "Rate limit exceeded",
                "extensions": {"code": "RATELIMITED", "type": "ratelimited"},
            }
            return Reply(400, {"errors": [error]}, headers)
        body: dict[str, Any] = {"data": result.data}
        if result.errors:
            body["errors"] = [error_body(e) for e in result.errors]
        return Reply(200, body, headers)

    # -- resolvers -------------------------------------------------------------------

    def _root(self) -> dict[str, Any]:
        return {
            "viewer": {"id": "user-1", "name": "Fake User", "email": "fake@example.com"},
            "organization": {"id": "org-1", "name": self.organization, "urlKey": self.organization},
            "teams": lambda info, **a: self._connection(
                info, list(self.teams.values()), a, self._team
            ),
            "team": lambda info, id: self._team(self._get(self.teams, id, "Team")),
            "issues": lambda info, **a: self._issues(info, None, a),
            "issue": lambda info, id: self._issue(self._get(self.issues, id, "Issue")),
            "comments": lambda info, **a: self._comments(info, None, a),
            "comment": lambda info, id=None, **_: self._comment(
                self._get(self.comments, id, "Comment")
            ),
        }

    @staticmethod
    def _get(table: dict[str, Any], ident: str | None, kind: str) -> Any:
        if ident is None or ident not in table:
            raise GraphQLError(f"Entity not found: {kind}", extensions={"code": "INVALID_INPUT"})
        return table[ident]

    def _team(self, team: FakeTeam) -> dict[str, Any]:
        return {
            "id": team.id,
            "key": team.key,
            "name": team.name,
            "description": None,
            "createdAt": iso(team.created_at),
            "updatedAt": iso(team.created_at),
            "issues": lambda info, **a: self._issues(info, team.id, a),
        }

    def _issue(self, issue: FakeIssue) -> dict[str, Any]:
        team = self.teams[issue.team_id]
        identifier = f"{team.key}-{issue.number}"
        return {
            "id": issue.id,
            "identifier": identifier,
            "number": float(issue.number),
            "title": issue.title,
            "description": issue.description,
            "url": f"https://linear.app/{self.organization}/issue/{identifier}",
            "createdAt": iso(issue.created_at),
            "updatedAt": iso(issue.updated_at),
            "archivedAt": None,
            "team": lambda info: self._team(team),
            "comments": lambda info, **a: self._comments(info, issue.id, a),
        }

    def _comment(self, comment: FakeComment) -> dict[str, Any]:
        issue = self.issues.get(comment.issue_id)
        url = self._issue(issue)["url"] if issue else "https://linear.app"
        return {
            "id": comment.id,
            "body": comment.body,
            "url": f"{url}#comment-{comment.id[:8]}",
            "createdAt": iso(comment.created_at),
            "updatedAt": iso(comment.updated_at),
            "issue": (lambda info: self._issue(issue)) if issue else None,
            "user": {"id": "user-1", "name": "Fake User", "email": "fake@example.com"},
        }

    def _issues(self, info: Any, team_id: str | None, args: dict[str, Any]) -> dict[str, Any]:
        issues = [
            i
            for i in self.issues.values()
            if (team_id is None or i.team_id == team_id) and issue_matches(i, args.get("filter"))
        ]
        return self._connection(info, issues, args, self._issue)

    def _comments(self, info: Any, issue_id: str | None, args: dict[str, Any]) -> dict[str, Any]:
        wanted = args.get("filter") or {}
        comments = []
        for comment in self.comments.values():
            issue = self.issues.get(comment.issue_id)
            if issue_id is not None and comment.issue_id != issue_id:
                continue
            if not compare_id(comment.id, wanted.get("id")):
                continue
            if not compare_date(comment.updated_at, wanted.get("updatedAt")):
                continue
            if wanted.get("issue") is not None and (
                issue is None or not issue_matches(issue, wanted["issue"])
            ):
                continue
            comments.append(comment)
        return self._connection(info, comments, args, self._comment)

    def _connection(
        self,
        info: Any,
        items: list[Any],
        args: dict[str, Any],
        render: Callable[[Any], dict[str, Any]],
    ) -> dict[str, Any]:
        order = args.get("orderBy") or "createdAt"
        attr = "updated_at" if order == "updatedAt" else "created_at"
        items.sort(key=lambda i: (getattr(i, attr), i.id), reverse=True)
        after = decode_cursor(args.get("after"))
        if after is not None:
            items = [i for i in items if (getattr(i, attr), i.id) < after]
        first = max(0, min(int(args.get("first") or 50), MAX_FIRST))
        page, more = items[:first], len(items) > first
        cursors = [cursor(getattr(i, attr), i.id) for i in page]
        info.context["cost"] += len(page)
        return {
            "nodes": [render(i) for i in page],
            "edges": [{"node": render(i), "cursor": c} for i, c in zip(page, cursors, strict=True)],
            "pageInfo": {
                "hasPreviousPage": after is not None,
                "hasNextPage": more,
                "startCursor": cursors[0] if cursors else None,
                "endCursor": cursors[-1] if cursors else None,
            },
        }


def signed_delivery(
    event: str,
    action: str,
    data: dict[str, Any],
    secret: str,
    *,
    timestamp_ms: int | None = None,
    delivery_id: str | None = None,
) -> tuple[dict[str, str], bytes]:
    """The headers and body Linear would POST for an ``event`` (``Issue``, ``Comment``)."""
    payload = {
        "action": action,
        "type": event,
        "data": data,
        "url": "https://linear.app/acme/issue/ENG-1",
        "createdAt": iso(time.time()),
        "organizationId": "org-1",
        "webhookId": "webhook-1",
        "webhookTimestamp": int(time.time() * 1000) if timestamp_ms is None else timestamp_ms,
    }
    body = json.dumps(payload).encode()
    headers = {
        "Content-Type": "application/json; charset=utf-8",
        "Linear-Delivery": delivery_id or str(uuid.uuid4()),
        "Linear-Event": event,
        "Linear-Signature": hmac.new(secret.encode(), body, hashlib.sha256).hexdigest(),
        "User-Agent": "Linear-Webhook",
    }
    return headers, body
