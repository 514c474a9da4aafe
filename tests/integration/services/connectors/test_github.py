"""GitHub: the fake driven by PyGithub, then the connector against the fake (and its failures)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import github
import pytest
import redis

from services.connectors import github as connector
from services.connectors.nodes import Connection, MalformedWebhook, NodeRef, RateLimitState
from shared.errors import Delay, JobError, Unrecoverable
from shared.http import NotFound
from testkit.fakes.github_server import GithubServer, issue_payload, signed_delivery
from testkit.fakes.protocol_server import TRANSIENT_FAILURES

TOKEN = "ghp_fake"
REPO = "octo/hello"


@pytest.fixture
def server() -> Iterator[GithubServer]:
    fake = GithubServer(TOKEN)
    with fake:
        yield fake


@pytest.fixture
def conn(server: GithubServer) -> Connection:
    return Connection(
        source="github",
        connection_id=11,
        organization_id=3,
        base_url=server.base_url,
        credentials={"token": TOKEN},
        settings={},
        timeout=2.0,
    )


def walk_all(
    conn: Connection, root: NodeRef, since: str | None = None
) -> tuple[list[NodeRef], str | None, int]:
    refs: list[NodeRef] = []
    checkpoint: str | None = None
    pages = 0
    while True:
        page = connector.SOURCE.walk(conn, root, checkpoint, since)
        pages += 1
        refs += page.refs
        checkpoint = page.checkpoint
        if checkpoint is None:
            return refs, page.watermark, pages


# -- the fake, as PyGithub sees it ---------------------------------------------------------


def test_pygithub_reads_issues_pulls_and_comments(server: GithubServer) -> None:
    server.populate(REPO, issues=150, pulls=40, comments=2)
    gh = github.Github(
        base_url=server.base_url,
        auth=github.Auth.Token(TOKEN),
        per_page=100,
        seconds_between_requests=None,
    )
    repo = gh.get_repo(REPO)
    assert repo.full_name == REPO

    issues = list(repo.get_issues(state="all", sort="updated", direction="asc"))
    assert len(issues) == 190  # two pages through the link header
    assert sum(1 for i in issues if "/pull/" in i.html_url) == 40
    assert [c.body for c in issues[0].get_comments()] == ["Comment 0 on 1", "Comment 1 on 1"]
    assert len(list(repo.get_pulls(state="all"))) == 40
    assert repo.get_issue(190).as_pull_request().number == 190

    since = datetime.fromtimestamp(issues[-10].updated_at.timestamp(), UTC)
    assert len(list(repo.get_issues(state="all", since=since))) == 10

    with pytest.raises(github.UnknownObjectException):
        repo.get_issue(9999)
    with pytest.raises(github.BadCredentialsException):
        github.Github(base_url=server.base_url, auth=github.Auth.Token("wrong")).get_repo(REPO)


def test_pygithub_sees_the_rate_limit_headers(server: GithubServer) -> None:
    server.rate_limit = 3
    server.populate(REPO, issues=1)
    gh = github.Github(
        base_url=server.base_url,
        auth=github.Auth.Token(TOKEN),
        retry=None,
        seconds_between_requests=None,
    )
    repo = gh.get_repo(REPO)
    repo.get_issue(1)
    assert gh.rate_limiting[0] == 1
    repo.get_issue(1)
    with pytest.raises(github.RateLimitExceededException):
        repo.get_issue(1)


# -- the connector -------------------------------------------------------------------------


def test_list_roots_follows_pages(server: GithubServer, conn: Connection) -> None:
    server.max_per_page = 2
    for name in ("octo/a", "octo/b", "octo/c"):
        server.repo(name)
    assert [r.node_id for r in connector.SOURCE.list_roots(conn)] == ["octo/a", "octo/b", "octo/c"]
    pinned = replace(conn, settings={"repositories": ["octo/x"]})
    assert connector.SOURCE.list_roots(pinned) == [NodeRef("GithubRepo", "octo/x")]


def test_walk_lists_every_issue_and_pull_once_then_only_changes(
    server: GithubServer, conn: Connection
) -> None:
    server.populate(REPO, issues=230, pulls=20)
    root = NodeRef("GithubRepo", REPO)
    refs, watermark, pages = walk_all(conn, root)
    assert pages == 3
    assert len(refs) == len(set(refs)) == 250
    assert sum(1 for r in refs if r.node_type == "GithubPullRequest") == 20
    assert NodeRef("GithubIssue", f"{REPO}#1") in refs
    assert watermark == "2026-01-01T04:10:00Z"  # number 250, a minute apart

    server.touch(REPO, 7, body="edited")
    again, watermark2, _ = walk_all(conn, root, since=watermark)
    assert NodeRef("GithubIssue", f"{REPO}#7") in again
    assert len(again) == 2  # the boundary item (250) again, the index skips it by date
    assert watermark2 is not None and watermark2 > watermark


def test_an_issue_edited_during_the_walk_is_not_skipped(
    server: GithubServer, conn: Connection
) -> None:
    server.populate(REPO, issues=10)
    conn = replace(conn, settings={"per_page": 3})
    root = NodeRef("GithubRepo", REPO)
    first = connector.SOURCE.walk(conn, root, None)
    assert [r.node_id for r in first.refs] == [f"{REPO}#{n}" for n in (1, 2, 3)]
    server.touch(REPO, 2)  # moves to the end; offsets would skip number 4
    refs = list(first.refs)
    checkpoint = first.checkpoint
    while checkpoint is not None:
        page = connector.SOURCE.walk(conn, root, checkpoint)
        refs += page.refs
        checkpoint = page.checkpoint
    numbers = [int(r.node_id.rsplit("#", 1)[1]) for r in refs]
    assert set(numbers) == set(range(1, 11))


def test_many_issues_updated_in_the_same_second(server: GithubServer, conn: Connection) -> None:
    for n in range(7):
        server.add_issue(REPO, f"same {n}", updated_at=1_800_000_000.0)
    server.add_issue(REPO, "later", updated_at=1_800_000_100.0)
    refs, watermark, _ = walk_all(
        replace(conn, settings={"per_page": 2}), NodeRef("GithubRepo", REPO)
    )
    assert sorted(int(r.node_id.rsplit("#", 1)[1]) for r in refs) == list(range(1, 9))
    assert watermark == "2027-01-15T08:01:40Z"


def test_fetch_renders_the_body_and_comments(server: GithubServer, conn: Connection) -> None:
    issue = server.add_issue(
        REPO, "Crash on start", "It crashes.", comments=["Same here", "Fixed?"]
    )
    server.max_per_page = 1  # comments over two pages
    node = connector.SOURCE.fetch(conn, NodeRef("GithubIssue", f"{REPO}#{issue.number}"))
    assert node is not None
    assert node.title == "#1 Crash on start"
    assert node.text == "It crashes.\n\nhubot: Same here\n\nhubot: Fixed?"
    assert node.url == f"https://github.com/{REPO}/issues/1"
    assert node.synchronization_date.tzinfo is not None
    assert connector.SOURCE.fetch(conn, NodeRef("GithubIssue", f"{REPO}#99")) is None
    assert connector.SOURCE.fetch(conn, NodeRef("GithubIssue", "octo/gone#1")) is None


def test_bad_credentials_are_unrecoverable(server: GithubServer, conn: Connection) -> None:
    server.populate(REPO, issues=1)
    with pytest.raises(Unrecoverable, match="401"):
        connector.SOURCE.walk(
            replace(conn, credentials={"token": "nope"}), NodeRef("GithubRepo", REPO), None
        )
    with pytest.raises(Unrecoverable, match="no token"):
        connector.SOURCE.fetch(replace(conn, credentials={}), NodeRef("GithubIssue", f"{REPO}#1"))


@pytest.mark.parametrize(
    ("kind", "options", "error"),
    [case[1:] for case in TRANSIENT_FAILURES],
    ids=[case[0] for case in TRANSIENT_FAILURES],
)
def test_transient_failures(
    server: GithubServer,
    conn: Connection,
    kind: str,
    options: dict[str, Any],
    error: type[JobError],
) -> None:
    if kind == "429" and "retry_after" not in options:
        error = Delay  # GitHub: a 429 without headers means "wait at least a minute"
    server.populate(REPO, issues=3)
    server.fail(f"/repos/{REPO}/issues/2/comments", kind, **options)
    with pytest.raises(error):
        connector.SOURCE.fetch(conn, NodeRef("GithubIssue", f"{REPO}#2"))
    assert connector.SOURCE.fetch(conn, NodeRef("GithubIssue", f"{REPO}#2")) is not None


def test_primary_limit_delays_until_reset_and_blocks_the_connection(
    server: GithubServer, conn: Connection, redis_client: redis.Redis, namespace: str
) -> None:
    state = RateLimitState(redis_client, namespace)
    conn = replace(conn, rate_limits=state)
    server.rate_limit = 2
    server.populate(REPO, issues=3)
    ref = NodeRef("GithubIssue", f"{REPO}#1")
    assert state.blocked_until(conn) is None
    assert connector.SOURCE.fetch(conn, ref) is not None  # the issue, its comments: 0 left
    until = state.blocked_until(conn)
    assert until is not None
    with pytest.raises(Delay) as caught:
        connector.SOURCE.fetch(conn, ref)  # 403 with x-ratelimit-remaining: 0
    assert until is not None and abs(until.timestamp() - caught.value.until) < 1
    assert until > datetime.now(UTC) + timedelta(minutes=50)
    other = replace(conn, connection_id=12)
    assert state.blocked_until(other) is None


def test_secondary_limit_delays_by_retry_after(
    server: GithubServer, conn: Connection, redis_client: redis.Redis, namespace: str
) -> None:
    state = RateLimitState(redis_client, namespace)
    conn = replace(conn, rate_limits=state)
    server.populate(REPO, issues=1)
    server.secondary_limit(retry_after=120)
    with pytest.raises(Delay) as caught:
        connector.SOURCE.walk(conn, NodeRef("GithubRepo", REPO), None)
    assert 115 < caught.value.until - time.time() <= 121
    blocked = state.blocked_until(conn)
    assert blocked is not None and abs(blocked.timestamp() - caught.value.until) < 1
    assert connector.SOURCE.walk(conn, NodeRef("GithubRepo", REPO), None).refs


def test_a_repeated_secondary_limit_backs_off_exponentially_within_the_bound(
    server: GithubServer, conn: Connection, redis_client: redis.Redis, namespace: str
) -> None:
    # GitHub: without retry-after wait at least a minute, then exponentially longer while
    # the secondary limit repeats (rate-limits-for-the-rest-api, "Exceeding the rate limit")
    state = RateLimitState(redis_client, namespace, backoff_max_seconds=200)
    conn = replace(conn, rate_limits=state)
    server.populate(REPO, issues=1)
    server.secondary_limit(retry_after=None, times=4)
    waits = []
    for _ in range(4):
        with pytest.raises(Delay) as caught:
            connector.SOURCE.walk(conn, NodeRef("GithubRepo", REPO), None)
        waits.append(caught.value.until - time.time())

    # 60, then drawn in [60, 120], [100, 200], [100, 200]: growing, never over the bound
    assert 58 < waits[0] <= 60
    assert 58 < waits[1] <= 120 and 98 < waits[2] <= 200 and 98 < waits[3] <= 200
    blocked = state.blocked_until(conn)
    # the connection is blocked to the longest of them (blocks only grow)
    assert blocked is not None and abs(blocked.timestamp() - time.time() - max(waits)) < 2
    other = replace(conn, connection_id=conn.connection_id + 1)
    server.secondary_limit(retry_after=None)
    with pytest.raises(Delay) as first_of_its_own:
        connector.SOURCE.walk(other, NodeRef("GithubRepo", REPO), None)
    assert first_of_its_own.value.until - time.time() <= 60  # streaks are per connection


def test_forbidden_without_a_limit_is_unrecoverable(server: GithubServer, conn: Connection) -> None:
    server.populate(REPO, issues=1)
    original = server._route

    def forbidden(request: Any) -> Any:
        from testkit.fakes.protocol_server import Reply

        return Reply(403, {"message": "Resource not accessible by integration"})

    server._route = forbidden  # type: ignore[method-assign]
    with pytest.raises(Unrecoverable, match="403"):
        connector.SOURCE.walk(conn, NodeRef("GithubRepo", REPO), None)
    server._route = original  # type: ignore[method-assign]


# -- webhooks ------------------------------------------------------------------------------

NOW = datetime.now(UTC)


def test_webhook_signature() -> None:
    headers, body = signed_delivery("issues", issue_payload(REPO, 4), "s3cret")
    assert connector.verify(headers, body, "s3cret", NOW)
    assert not connector.verify(headers, body, "other", NOW)
    assert not connector.verify(headers, body + b" ", "s3cret", NOW)
    assert not connector.verify(
        {**headers, "X-Hub-Signature-256": "sha256=00"}, body, "s3cret", NOW
    )
    assert not connector.verify({}, body, "s3cret", NOW)
    lower = {k.lower(): v for k, v in headers.items()}
    assert connector.verify(lower, body, "s3cret", NOW)


def test_webhook_parse() -> None:
    headers, body = signed_delivery("issues", issue_payload(REPO, 4), "s", delivery_id="d-1")
    event = connector.parse(headers, body)
    assert event.delivery_id == "d-1"
    assert event.root == NodeRef("GithubRepo", REPO)
    assert event.refs == [NodeRef("GithubIssue", f"{REPO}#4")]

    headers, body = signed_delivery("pull_request", issue_payload(REPO, 5, pull=True), "s")
    assert connector.parse(headers, body).refs == [NodeRef("GithubPullRequest", f"{REPO}#5")]

    comment = {
        "action": "created",
        "issue": {"number": 6, "pull_request": {}},
        "comment": {},
        "repository": {"full_name": REPO},
    }
    headers, body = signed_delivery("issue_comment", comment, "s")
    assert connector.parse(headers, body).refs == [NodeRef("GithubPullRequest", f"{REPO}#6")]

    review = {
        "action": "submitted",
        "pull_request": {"number": 8},
        "repository": {"full_name": REPO},
    }
    headers, body = signed_delivery("pull_request_review", review, "s")
    assert connector.parse(headers, body).refs == [NodeRef("GithubPullRequest", f"{REPO}#8")]

    headers, body = signed_delivery("issues", issue_payload(REPO, 4, action="deleted"), "s")
    gone = connector.parse(headers, body)
    assert gone.refs == [] and gone.removed == [NodeRef("GithubIssue", f"{REPO}#4")]

    headers, body = signed_delivery("ping", {"zen": "hi", "repository": {"full_name": REPO}}, "s")
    assert connector.parse(headers, body).refs == []

    with pytest.raises(MalformedWebhook):
        connector.parse(headers, b"{not json")
    with pytest.raises(MalformedWebhook):
        connector.parse({}, body)


def test_a_missing_repository_is_not_found(server: GithubServer, conn: Connection) -> None:
    with pytest.raises(NotFound):
        connector.SOURCE.walk(conn, NodeRef("GithubRepo", "octo/absent"), None)
