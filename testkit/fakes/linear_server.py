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

import base64
import hashlib
import hmac
import json
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from graphql import GraphQLError, build_schema, graphql_sync

from testkit.fakes.protocol_server import ProtocolServer, Reply, Request

BASE_TIME = 1_767_225_600.0  # 2026-01-01T00:00:00Z
MAX_FIRST = 250
NAMESPACE = uuid.UUID("6ca53058-9c75-4874-b9b5-000000000004")

SDL = """
scalar DateTime

enum PaginationOrderBy { createdAt updatedAt }

type PageInfo {
  hasPreviousPage: Boolean!
  hasNextPage: Boolean!
  startCursor: String
  endCursor: String
}

type User { id: ID! name: String! email: String! }
type Organization { id: ID! name: String! urlKey: String! }

type Team {
  id: ID!
  key: String!
  name: String!
  description: String
  createdAt: DateTime!
  updatedAt: DateTime!
  issues(first: Int, after: String, last: Int, before: String, filter: IssueFilter,
         orderBy: PaginationOrderBy, includeArchived: Boolean): IssueConnection!
}
type TeamEdge { node: Team! cursor: String! }
type TeamConnection { edges: [TeamEdge!]! nodes: [Team!]! pageInfo: PageInfo! }

type Issue {
  id: ID!
  identifier: String!
  number: Float!
  title: String!
  description: String
  url: String!
  createdAt: DateTime!
  updatedAt: DateTime!
  archivedAt: DateTime
  team: Team!
  comments(first: Int, after: String, last: Int, before: String, filter: CommentFilter,
           orderBy: PaginationOrderBy, includeArchived: Boolean): CommentConnection!
}
type IssueEdge { node: Issue! cursor: String! }
type IssueConnection { edges: [IssueEdge!]! nodes: [Issue!]! pageInfo: PageInfo! }

type Comment {
  id: ID!
  body: String!
  url: String!
  createdAt: DateTime!
  updatedAt: DateTime!
  issue: Issue
  user: User
}
type CommentEdge { node: Comment! cursor: String! }
type CommentConnection { edges: [CommentEdge!]! nodes: [Comment!]! pageInfo: PageInfo! }

input IDComparator { eq: ID, neq: ID, in: [ID!], nin: [ID!] }
input DateComparator { eq: DateTime, gt: DateTime, gte: DateTime, lt: DateTime, lte: DateTime }
input TeamFilter { id: IDComparator }
input IssueFilter {
  id: IDComparator
  team: TeamFilter
  createdAt: DateComparator
  updatedAt: DateComparator
  and: [IssueFilter!]
}
input NullableIssueFilter {
  id: IDComparator
  team: TeamFilter
  updatedAt: DateComparator
  null: Boolean
}
input CommentFilter { id: IDComparator, issue: NullableIssueFilter, updatedAt: DateComparator }

type Query {
  viewer: User!
  organization: Organization!
  teams(first: Int, after: String, last: Int, before: String, orderBy: PaginationOrderBy,
        includeArchived: Boolean): TeamConnection!
  team(id: String!): Team!
  issues(first: Int, after: String, last: Int, before: String, filter: IssueFilter,
         orderBy: PaginationOrderBy, includeArchived: Boolean): IssueConnection!
  issue(id: String!): Issue!
  comments(first: Int, after: String, last: Int, before: String, filter: CommentFilter,
           orderBy: PaginationOrderBy, includeArchived: Boolean): CommentConnection!
  comment(id: String, hash: String, issueId: String): Comment!
}
"""

SCHEMA = build_schema(SDL)


@dataclass
class FakeTeam:
    id: str
    key: str
    name: str
    created_at: float


@dataclass
class FakeIssue:
    id: str
    team_id: str
    number: int
    title: str
    description: str
    created_at: float
    updated_at: float


@dataclass
class FakeComment:
    id: str
    issue_id: str
    body: str
    created_at: float
    updated_at: float


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
            body["errors"] = [_error(e) for e in result.errors]
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
            if (team_id is None or i.team_id == team_id) and _issue_matches(i, args.get("filter"))
        ]
        return self._connection(info, issues, args, self._issue)

    def _comments(self, info: Any, issue_id: str | None, args: dict[str, Any]) -> dict[str, Any]:
        wanted = args.get("filter") or {}
        comments = []
        for comment in self.comments.values():
            issue = self.issues.get(comment.issue_id)
            if issue_id is not None and comment.issue_id != issue_id:
                continue
            if not _compare_id(comment.id, wanted.get("id")):
                continue
            if not _compare_date(comment.updated_at, wanted.get("updatedAt")):
                continue
            if wanted.get("issue") is not None and (
                issue is None or not _issue_matches(issue, wanted["issue"])
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
        after = _decode_cursor(args.get("after"))
        if after is not None:
            items = [i for i in items if (getattr(i, attr), i.id) < after]
        first = max(0, min(int(args.get("first") or 50), MAX_FIRST))
        page, more = items[:first], len(items) > first
        cursors = [_cursor(getattr(i, attr), i.id) for i in page]
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


def _cursor(value: float, ident: str) -> str:
    return base64.urlsafe_b64encode(json.dumps([value, ident]).encode()).decode()


def _decode_cursor(cursor: str | None) -> tuple[float, str] | None:
    if not cursor:
        return None
    try:
        value, ident = json.loads(base64.urlsafe_b64decode(cursor.encode()))
        return float(value), str(ident)
    except (ValueError, TypeError) as exc:
        raise GraphQLError("Invalid cursor", extensions={"code": "INVALID_INPUT"}) from exc


def iso(epoch: float) -> str:
    """RFC 3339 with milliseconds, as Linear writes its DateTimes (rounded to the
    millisecond, as the filters compare)."""
    seconds, millis = divmod(round(epoch * 1000), 1000)
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%S.") + f"{millis:03d}Z"


def _parse_date(value: Any) -> float:
    return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()


def _compare_date(value: float, comparator: dict[str, Any] | None) -> bool:
    if not comparator:
        return True
    checks = {
        "eq": lambda v, x: v == x,
        "gt": lambda v, x: v > x,
        "gte": lambda v, x: v >= x,
        "lt": lambda v, x: v < x,
        "lte": lambda v, x: v <= x,
    }
    # Timestamps travel with millisecond precision, so compare at that precision.
    ms = round(value * 1000)
    return all(
        checks[op](ms, round(_parse_date(arg) * 1000))
        for op, arg in comparator.items()
        if arg is not None and op in checks
    )


def _compare_id(value: str, comparator: dict[str, Any] | None) -> bool:
    if not comparator:
        return True
    if comparator.get("eq") is not None and value != comparator["eq"]:
        return False
    if comparator.get("neq") is not None and value == comparator["neq"]:
        return False
    if comparator.get("in") is not None and value not in comparator["in"]:
        return False
    return not (comparator.get("nin") is not None and value in comparator["nin"])


def _issue_matches(issue: FakeIssue, wanted: dict[str, Any] | None) -> bool:
    if not wanted:
        return True
    team = wanted.get("team") or {}
    return (
        _compare_id(issue.id, wanted.get("id"))
        and _compare_id(issue.team_id, team.get("id"))
        and _compare_date(issue.updated_at, wanted.get("updatedAt"))
        and _compare_date(issue.created_at, wanted.get("createdAt"))
        and all(_issue_matches(issue, part) for part in wanted.get("and") or [])
    )


def _error(error: GraphQLError) -> dict[str, Any]:
    body: dict[str, Any] = {"message": error.message}
    if error.path:
        body["path"] = list(error.path)
    body["extensions"] = error.extensions or {"code": "GRAPHQL_VALIDATION_FAILED"}
    return body


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
