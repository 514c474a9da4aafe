"""Linear: the fake driven by gql (schema fetched by introspection, queries validated against
it), then the connector against the fake (and its failures)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import redis
from gql import Client, GraphQLRequest, gql
from gql.transport.exceptions import TransportQueryError
from gql.transport.requests import RequestsHTTPTransport
from graphql import GraphQLError

from services.connectors import linear as connector
from services.connectors.nodes import Connection, MalformedWebhook, NodeRef, RateLimitState
from shared.errors import Delay, JobError, Unrecoverable
from testkit.fakes.linear_server import LinearServer, signed_delivery
from testkit.fakes.protocol_server import TRANSIENT_FAILURES

API_KEY = "lin_api_fake"


@pytest.fixture
def server() -> Iterator[LinearServer]:
    fake = LinearServer(API_KEY)
    with fake:
        yield fake


@pytest.fixture
def conn(server: LinearServer) -> Connection:
    return Connection(
        source="linear",
        connection_id=21,
        organization_id=3,
        base_url=server.base_url,
        credentials={"api_key": API_KEY},
        settings={},
        timeout=2.0,
    )


def sdk(server: LinearServer, key: str = API_KEY) -> Client:
    transport = RequestsHTTPTransport(
        url=f"{server.base_url}/graphql", headers={"Authorization": key}, retries=0
    )
    return Client(transport=transport, fetch_schema_from_transport=True)


def walk_all(
    conn: Connection, root: NodeRef, since: str | None = None
) -> tuple[list[NodeRef], str | None]:
    refs: list[NodeRef] = []
    checkpoint: str | None = None
    while True:
        page = connector.SOURCE.walk(conn, root, checkpoint, since)
        refs += page.refs
        checkpoint = page.checkpoint
        if checkpoint is None:
            return refs, page.watermark


# -- the fake, as gql sees it --------------------------------------------------------------


def test_gql_pages_through_a_team_with_linear_schema_names(server: LinearServer) -> None:
    team = server.populate("ENG", issues=120, comments=1)
    query = gql(
        """
        query TeamIssues($team: String!, $after: String) {
          team(id: $team) {
            key
            issues(first: 50, after: $after, orderBy: updatedAt) {
              nodes { id identifier title updatedAt comments(first: 10) { nodes { body } } }
              pageInfo { hasNextPage endCursor }
            }
          }
        }"""
    )
    seen: list[dict[str, Any]] = []
    after = None
    with sdk(server) as session:
        while True:
            request = GraphQLRequest(query, variable_values={"team": team.id, "after": after})
            result = session.execute(request)
            issues = result["team"]["issues"]
            seen += issues["nodes"]
            if not issues["pageInfo"]["hasNextPage"]:
                break
            after = issues["pageInfo"]["endCursor"]
        assert len(seen) == len({i["id"] for i in seen}) == 120
        assert seen[0]["identifier"] == "ENG-120"  # most recently updated first
        assert seen[0]["comments"]["nodes"] == [{"body": "Comment 0 on ENG-120"}]

        comment_filter = {
            "issue": {"team": {"id": {"eq": team.id}}},
            "updatedAt": {"gt": seen[2]["updatedAt"]},
        }
        filtered = session.execute(
            GraphQLRequest(
                """query($f: CommentFilter) {
                  comments(first: 250, filter: $f) { nodes { id issue { identifier } } }
                }""",
                variable_values={"f": comment_filter},
            )
        )
        assert {c["issue"]["identifier"] for c in filtered["comments"]["nodes"]} == {
            "ENG-120",
            "ENG-119",
        }

        with pytest.raises(GraphQLError):  # validated locally against the fetched schema
            session.execute(gql("{ issues { nodes { notAField } } }"))
        with pytest.raises(TransportQueryError, match="Entity not found"):
            session.execute(gql('{ issue(id: "nope") { id } }'))


def test_gql_sees_bad_credentials_and_rate_limits(server: LinearServer) -> None:
    from gql.transport.exceptions import TransportServerError

    refused = (TransportQueryError, TransportServerError)
    with pytest.raises(refused, match=r"not authenticated|401"), sdk(server, "wrong") as session:
        session.execute(gql("{ viewer { id } }"))
    server.requests_budget.limit = 1
    transport = RequestsHTTPTransport(
        url=f"{server.base_url}/graphql", headers={"Authorization": API_KEY}, retries=0
    )
    with Client(transport=transport) as session:
        session.execute(gql("{ viewer { id } }"))
        with pytest.raises(
            (TransportQueryError, TransportServerError), match=r"RATELIMITED|Rate limit|400"
        ):
            session.execute(gql("{ viewer { id } }"))
    limited = server.requests[-1]
    assert limited.path == "/graphql"


# -- the connector -------------------------------------------------------------------------


def test_list_roots(server: LinearServer, conn: Connection) -> None:
    eng, ops = server.team("ENG"), server.team("OPS")
    assert {r.node_id for r in connector.SOURCE.list_roots(conn)} == {eng.id, ops.id}


def test_walk_lists_issues_then_comments_once_then_only_changes(
    server: LinearServer, conn: Connection
) -> None:
    team = server.populate("ENG", issues=230, comments=1)
    server.populate("OPS", issues=5, comments=1)
    root = NodeRef("LinearTeam", team.id)
    refs, watermark = walk_all(conn, root)
    assert len(refs) == len(set(refs)) == 460
    assert sum(1 for r in refs if r.node_type == "LinearIssue") == 230
    assert watermark == "2026-01-01T03:50:00.000Z"

    issue = next(i for i in server.issues.values() if i.team_id == team.id and i.number == 7)
    server.touch(issue.id, description="edited")
    again, watermark2 = walk_all(conn, root, since=watermark)
    assert again == [NodeRef("LinearIssue", issue.id)]
    assert watermark2 is not None and watermark2 > watermark
    assert walk_all(conn, root, since=watermark2)[0] == []


def test_an_issue_edited_during_the_walk_is_seen_by_the_next_walk(
    server: LinearServer, conn: Connection
) -> None:
    team = server.populate("ENG", issues=10)
    conn = replace(conn, settings={"page_size": 3})
    root = NodeRef("LinearTeam", team.id)
    first = connector.SOURCE.walk(conn, root, None)
    oldest = next(i for i in server.issues.values() if i.number == 1)
    server.touch(oldest.id)  # jumps ahead of the cursor
    refs, checkpoint = list(first.refs), first.checkpoint
    while checkpoint is not None:
        page = connector.SOURCE.walk(conn, root, checkpoint)
        refs += page.refs
        checkpoint, watermark = page.checkpoint, page.watermark
    listed = {r.node_id for r in refs}
    assert len(listed) == 9 and oldest.id not in listed  # moved before the cursor
    assert walk_all(conn, root, since=watermark)[0] == [NodeRef("LinearIssue", oldest.id)]


def test_fetch_issue_and_comment(server: LinearServer, conn: Connection) -> None:
    issue = server.add_issue("ENG", "Login fails", "Steps: open the app.")
    comment = server.add_comment(issue.id, "Reproduced on iOS.")
    node = connector.SOURCE.fetch(conn, NodeRef("LinearIssue", issue.id))
    assert node is not None
    assert node.title == "ENG-1 Login fails"
    assert node.text == "Login fails\n\nSteps: open the app."
    assert node.url == "https://linear.app/acme/issue/ENG-1"
    assert abs(node.synchronization_date.timestamp() - issue.updated_at) < 0.01
    note = connector.SOURCE.fetch(conn, NodeRef("LinearComment", comment.id))
    assert note is not None
    assert note.text == "Reproduced on iOS."
    assert note.parent == NodeRef("LinearIssue", issue.id)
    assert note.title == "Comment on ENG-1 Login fails"
    server.delete_issue(issue.id)
    assert connector.SOURCE.fetch(conn, NodeRef("LinearIssue", issue.id)) is None


def test_bad_credentials_are_unrecoverable(server: LinearServer, conn: Connection) -> None:
    with pytest.raises(Unrecoverable):
        connector.SOURCE.list_roots(replace(conn, credentials={"api_key": "wrong"}))
    with pytest.raises(Unrecoverable, match="no api_key"):
        connector.SOURCE.list_roots(replace(conn, credentials={}))
    server.api_key = "oauth-token"
    assert (
        connector.SOURCE.list_roots(replace(conn, credentials={"access_token": "oauth-token"}))
        == []
    )


@pytest.mark.parametrize(
    ("kind", "options", "error"),
    [case[1:] for case in TRANSIENT_FAILURES],
    ids=[case[0] for case in TRANSIENT_FAILURES],
)
def test_transient_failures(
    server: LinearServer,
    conn: Connection,
    kind: str,
    options: dict[str, Any],
    error: type[JobError],
) -> None:
    team = server.populate("ENG", issues=3)
    server.fail("/graphql", kind, **options)
    root = NodeRef("LinearTeam", team.id)
    with pytest.raises(error):
        connector.SOURCE.walk(conn, root, None)
    assert len(connector.SOURCE.walk(conn, root, None).refs) == 3


def test_rate_limited_delays_until_the_spent_budget_resets(
    server: LinearServer, conn: Connection, redis_client: redis.Redis, namespace: str
) -> None:
    state = RateLimitState(redis_client, namespace)
    conn = replace(conn, rate_limits=state)
    team = server.populate("ENG", issues=30)
    server.requests_budget.limit = 100
    server.complexity_budget.limit = 25  # one page of 30 issues costs 31
    server.complexity_budget.window = 600
    with pytest.raises(Delay) as caught:
        connector.SOURCE.walk(conn, NodeRef("LinearTeam", team.id), None)
    assert 590 < caught.value.until - time.time() <= 601
    until = state.blocked_until(conn)
    assert until is not None and abs(until.timestamp() - caught.value.until) < 1


def test_low_budget_is_recorded_before_it_runs_out(
    server: LinearServer, conn: Connection, redis_client: redis.Redis, namespace: str
) -> None:
    state = RateLimitState(redis_client, namespace, reserve=5)
    conn = replace(conn, rate_limits=state)
    server.requests_budget.limit = 6
    connector.SOURCE.list_roots(conn)
    assert state.blocked_until(conn) is not None


# -- webhooks ------------------------------------------------------------------------------


def test_webhook_signature_and_timestamp_window() -> None:
    now = datetime.now(UTC)
    data = {"id": "issue-1", "teamId": "team-1"}
    headers, body = signed_delivery("Issue", "update", data, "whsec")
    assert connector.verify(headers, body, "whsec", now)
    assert not connector.verify(headers, body, "other", now)
    assert not connector.verify(headers, body.replace(b"update", b"remove"), "whsec", now)
    assert not connector.verify(headers, body, "whsec", now + timedelta(seconds=61))
    assert connector.verify(headers, body, "whsec", now + timedelta(seconds=59))
    stale_ms = int((now - timedelta(minutes=5)).timestamp() * 1000)
    headers, body = signed_delivery("Issue", "update", data, "whsec", timestamp_ms=stale_ms)
    assert not connector.verify(headers, body, "whsec", now)


def test_webhook_parse() -> None:
    headers, body = signed_delivery(
        "Issue", "update", {"id": "i-1", "teamId": "t-1"}, "s", delivery_id="d-9"
    )
    event = connector.parse(headers, body)
    assert (event.delivery_id, event.kind) == ("d-9", "Issue")
    assert event.refs == [NodeRef("LinearIssue", "i-1")] and event.root == NodeRef(
        "LinearTeam", "t-1"
    )

    headers, body = signed_delivery(
        "Comment", "create", {"id": "c-1", "issue": {"id": "i-1", "teamId": "t-1"}}, "s"
    )
    event = connector.parse(headers, body)
    assert event.refs == [NodeRef("LinearComment", "c-1")] and event.root == NodeRef(
        "LinearTeam", "t-1"
    )

    headers, body = signed_delivery("Issue", "remove", {"id": "i-2", "teamId": "t-1"}, "s")
    assert connector.parse(headers, body).removed == [NodeRef("LinearIssue", "i-2")]

    headers, body = signed_delivery("Cycle", "update", {"id": "cy-1"}, "s")
    assert connector.parse(headers, body).refs == []
    with pytest.raises(MalformedWebhook):
        connector.parse(headers, b"[]")
    with pytest.raises(MalformedWebhook):
        connector.parse({}, body)
