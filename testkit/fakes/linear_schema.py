"""Linear's GraphQL API as the fake (``testkit.fakes.linear_server``) serves it: the schema
(a subset of Linear's published one, type and field names as there), the records it holds,
and how its arguments are read: keyset cursors, ``IDComparator`` and ``DateComparator``
filters compared at millisecond precision, and GraphQL errors as Linear sends them."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from graphql import GraphQLError, build_schema

#: The most items one page may hold (``first``).
MAX_FIRST = 250

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


def cursor(value: float, ident: str) -> str:
    """A keyset cursor: the ordering value and the id of the last item of a page."""
    return base64.urlsafe_b64encode(json.dumps([value, ident]).encode()).decode()


def decode_cursor(cursor: str | None) -> tuple[float, str] | None:
    """The position a cursor names (None: from the start); a malformed one is an
    ``INVALID_INPUT`` error."""
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


def parse_date(value: Any) -> float:
    """A DateTime argument as seconds since the epoch."""
    return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()


def compare_date(value: float, comparator: dict[str, Any] | None) -> bool:
    """Whether ``value`` passes a ``DateComparator`` (``eq``, ``gt``, ``gte``, ``lt``, ``lte``)."""
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
        checks[op](ms, round(parse_date(arg) * 1000))
        for op, arg in comparator.items()
        if arg is not None and op in checks
    )


def compare_id(value: str, comparator: dict[str, Any] | None) -> bool:
    """Whether ``value`` passes an ``IDComparator`` (``eq``, ``neq``, ``in``, ``nin``)."""
    if not comparator:
        return True
    if comparator.get("eq") is not None and value != comparator["eq"]:
        return False
    if comparator.get("neq") is not None and value == comparator["neq"]:
        return False
    if comparator.get("in") is not None and value not in comparator["in"]:
        return False
    return not (comparator.get("nin") is not None and value in comparator["nin"])


def issue_matches(issue: FakeIssue, wanted: dict[str, Any] | None) -> bool:
    """Whether ``issue`` passes an ``IssueFilter`` (its id, team, dates and ``and``)."""
    if not wanted:
        return True
    team = wanted.get("team") or {}
    return (
        compare_id(issue.id, wanted.get("id"))
        and compare_id(issue.team_id, team.get("id"))
        and compare_date(issue.updated_at, wanted.get("updatedAt"))
        and compare_date(issue.created_at, wanted.get("createdAt"))
        and all(issue_matches(issue, part) for part in wanted.get("and") or [])
    )


def error_body(error: GraphQLError) -> dict[str, Any]:
    """A GraphQL error as the answer's ``errors`` lists it (a validation error's code when
    it carries none)."""
    body: dict[str, Any] = {"message": error.message}
    if error.path:
        body["path"] = list(error.path)
    body["extensions"] = error.extensions or {"code": "GRAPHQL_VALIDATION_FAILED"}
    return body
